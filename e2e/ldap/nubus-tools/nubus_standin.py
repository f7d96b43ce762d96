"""Shared part of the stand-ins of Nubus 1.22's cleanup tools (remove_sambantpassword,
remove_krb5key_keytypes) for Stagehand's tests. Python 3 standard library plus OpenLDAP's
ldapsearch/ldapmodify, bound with SASL EXTERNAL over a slapd's ldapi socket.

Settings are files next to the tools (the tests copy this directory per test):
  ldapi-url      the slapd's ldapi:// URL (required)
  base-dn        the search base (default dc=swp-ldap,dc=internal)
  fail-<tool>    the tool prints the file's text to stderr and exits 1 before doing anything
  hang-<tool>    the tool sleeps that many seconds before doing anything
  nthash-not-false  remove_sambantpassword warns as when UCR password/samba/nthash is not false
  nthash-written-again  after removing the hashes (not in a dry run), remove_sambantpassword
                 writes an NT hash again on the DN the file names, as UDM does when that user
                 changes the password while the tool runs and password/samba/nthash is not false
"""

import base64
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(sys.argv[0]))


def setting(name, default=None):
    path = os.path.join(HERE, name)
    if not os.path.exists(path):
        return default
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


def switches(tool):
    """The test's switches: fail or hang before doing anything."""
    hang = setting("hang-" + tool)
    if hang:
        time.sleep(float(hang))
    fail = setting("fail-" + tool)
    if fail is not None:
        print(fail or "failing as asked", file=sys.stderr)
        sys.exit(1)


def url():
    value = setting("ldapi-url")
    if not value:
        raise SystemExit("%s: no ldapi-url file next to the tool" % HERE)
    return value


def search(filter_, attrs):
    """Every entry below the base matching filter_: [(dn, {attr lower: [bytes]})]."""
    out = subprocess.run(
        ["ldapsearch", "-LLL", "-Q", "-Y", "EXTERNAL", "-H", url(), "-o", "ldif-wrap=no",
         "-b", setting("base-dn", "dc=swp-ldap,dc=internal"), filter_] + attrs,
        check=True, capture_output=True,
    ).stdout.decode("utf-8")
    entries = []
    for block in out.split("\n\n"):
        dn, values = None, {}
        for line in block.splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, rest = line.partition(":")
            if rest.startswith(":"):
                value = base64.b64decode(rest[1:].strip())
            else:
                value = rest.strip().encode("utf-8")
            if name == "dn":
                dn = value.decode("utf-8")
            else:
                values.setdefault(name.lower(), []).append(value)
        if dn is not None:
            entries.append((dn, values))
    return entries


def modify(dn, changes):
    """One LDAP modify of dn: changes is [(op, attr, [bytes])], op delete or replace."""
    lines = ["dn:: " + base64.b64encode(dn.encode("utf-8")).decode("ascii"), "changetype: modify"]
    for op, attr, values in changes:
        lines.append("%s: %s" % (op, attr))
        for value in values:
            lines.append("%s:: %s" % (attr, base64.b64encode(value).decode("ascii")))
        lines.append("-")
    ldif = "\n".join(lines) + "\n"
    subprocess.run(
        ["ldapmodify", "-Q", "-Y", "EXTERNAL", "-H", url()],
        input=ldif.encode("utf-8"), check=True, capture_output=True,
    )


def _tlv(buf, pos):
    """(tag, start of content, end of content) of the DER element at pos."""
    if pos + 2 > len(buf):
        raise ValueError("truncated DER element at offset %d" % pos)
    tag, first = buf[pos], buf[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        n = first & 0x7F
        if n == 0 or n > 4 or pos + n > len(buf):
            raise ValueError("bad DER length at offset %d" % (pos - 1))
        length = int.from_bytes(buf[pos:pos + n], "big")
        pos += n
    if pos + length > len(buf):
        raise ValueError("DER element at offset %d runs past the end" % pos)
    return tag, pos, pos + length


def _children(buf, start, end):
    pos, out = start, []
    while pos < end:
        tag, s, e = _tlv(buf, pos)
        out.append((tag, s, e))
        pos = e
    if pos != end:
        raise ValueError("DER elements overrun their container")
    return out


def keytype(value):
    """The enctype of a krb5Key value: Heimdal's DER-encoded hdb Key,
    SEQUENCE { mkvno [0] INTEGER OPTIONAL, key [1] EncryptionKey, salt [2] Salt OPTIONAL },
    EncryptionKey = SEQUENCE { keytype [0] INTEGER, keyvalue [1] OCTET STRING }.
    Raises ValueError when it is not one."""
    tag, s, e = _tlv(value, 0)
    if tag != 0x30 or e != len(value):
        raise ValueError("not a DER SEQUENCE")
    fields = {t: (cs, ce) for t, cs, ce in _children(value, s, e)}
    if 0xA1 not in fields:
        raise ValueError("no key [1] in Key")
    cs, ce = fields[0xA1]
    tag, s, e = _tlv(value, cs)
    if tag != 0x30 or e != ce:
        raise ValueError("EncryptionKey is not a SEQUENCE")
    inner = {t: (a, b) for t, a, b in _children(value, s, e)}
    if 0xA0 not in inner or 0xA1 not in inner:
        raise ValueError("EncryptionKey lacks keytype or keyvalue")
    tag, s, e = _tlv(value, inner[0xA0][0])
    if tag != 0x02 or e == s:
        raise ValueError("keytype is not an INTEGER")
    tag, _, _ = _tlv(value, inner[0xA1][0])
    if tag != 0x04:
        raise ValueError("keyvalue is not an OCTET STRING")
    return int.from_bytes(value[s:e], "big", signed=True)
