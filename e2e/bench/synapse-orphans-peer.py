#!/usr/bin/env python3
"""The peer of e2e/bench/synapse-orphans: the script a person would write to deactivate the
Matrix accounts whose IAM user is gone, with the standard library only.

1. List the accounts with Synapse's admin API, paged:
   GET /_synapse/admin/v2/users?from=<next_token>&limit=<page>&guests=false
2. Look up each account's external ids: GET /_synapse/admin/v2/users/<user_id>
   (the list does not carry them); keep those bound to the `oidc` provider.
3. Read the IAM's identifiers: ldapsearch (paged) of every user's univentionObjectIdentifier.
4. Orphans: OIDC-bound accounts whose subject no user carries.
5. With --apply: POST /_synapse/admin/v1/deactivate/<user_id> {"erase": true}, one by one.

Prints one JSON line: {"listing_s", "accounts", "oidc_bound", "orphans", "deactivate_s",
"deactivated"}. The admin access token comes from the file named by --token-file.
"""

import argparse
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request


def call(base, token, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--ldap-url", required=True)
    p.add_argument("--bind-dn", required=True)
    p.add_argument("--bind-password-file", required=True)
    p.add_argument("--base", required=True)
    p.add_argument("--page", type=int, default=100)
    p.add_argument("--apply", action="store_true")
    a = p.parse_args()
    token = open(a.token_file).read().strip()

    t0 = time.monotonic()
    users, token_from = [], None
    while True:
        q = {"limit": a.page, "guests": "false"}
        if token_from is not None:
            q["from"] = token_from
        page = call(a.url, token, "GET", "/_synapse/admin/v2/users?" + urllib.parse.urlencode(q))
        users.extend(u["name"] for u in page["users"])
        token_from = page.get("next_token")
        if token_from is None:
            break
    bound = {}
    for name in users:
        detail = call(a.url, token, "GET", "/_synapse/admin/v2/users/" + urllib.parse.quote(name))
        for ext in detail.get("external_ids", []):
            if ext["auth_provider"] == "oidc":
                bound[name] = ext["external_id"]
    out = subprocess.run(
        ["ldapsearch", "-x", "-H", a.ldap_url, "-D", a.bind_dn, "-y", a.bind_password_file,
         "-LLL", "-o", "ldif-wrap=no", "-E", "pr=1000/noprompt", "-b", a.base,
         "(&(objectClass=person)(univentionObjectIdentifier=*))", "univentionObjectIdentifier"],
        check=True, capture_output=True, text=True).stdout
    known = {line.split(":", 1)[1].strip().lower() for line in out.splitlines()
             if line.startswith("univentionObjectIdentifier:")}
    orphans = sorted(name for name, subject in bound.items() if subject.lower() not in known)
    listing_s = time.monotonic() - t0

    deactivated, deactivate_s = 0, 0.0
    if a.apply:
        t1 = time.monotonic()
        for name in orphans:
            call(a.url, token, "POST", "/_synapse/admin/v1/deactivate/" + urllib.parse.quote(name),
                 {"erase": True})
            deactivated += 1
        deactivate_s = time.monotonic() - t1
    json.dump({"listing_s": listing_s, "accounts": len(users), "oidc_bound": len(bound),
               "orphans": len(orphans), "deactivate_s": deactivate_s,
               "deactivated": deactivated}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
