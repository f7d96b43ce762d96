//! SOAP 1.1 envelopes as OX App Suite's provisioning API speaks them: requests written with
//! quick-xml's writer (every value escaped), answers read with its namespace-aware reader into a
//! small element tree, faults sorted out of answers.
//!
//! Requests carry the operation wrapper and its parameters in [`TNS`], the fields of data objects
//! (`ctx`, `user`, `grp`, ...) in [`DO_SOAP`] and the `auth` fields in [`DO_RMI`], the namespaces
//! the server's WSDL declares. Answers are read by namespace URI, never by prefix (servers choose
//! their own); a data object's fields are taken by local name from its direct children, so a
//! nested map (a user's `userAttributes`) never stands in for a field, and `xsi:nil` elements
//! count as absent.

use std::borrow::Cow;

use quick_xml::Writer;
use quick_xml::escape::{escape, resolve_predefined_entity};
use quick_xml::events::{BytesEnd, BytesStart, BytesText, Event};
use quick_xml::name::ResolveResult;
use quick_xml::reader::NsReader;

/// The SOAP 1.1 envelope namespace.
pub const SOAP_ENV: &str = "http://schemas.xmlsoap.org/soap/envelope/";
/// Operations, their wrappers and parameters.
pub const TNS: &str = "http://soap.admin.openexchange.com";
/// `Context`, `User`, `Group`, `Account` and the other data objects.
pub const DO_SOAP: &str = "http://dataobjects.soap.admin.openexchange.com/xsd";
/// `Credentials`.
pub const DO_RMI: &str = "http://dataobjects.rmi.admin.openexchange.com/xsd";
/// `xsi:nil`.
const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// One parameter of an operation, in the order the WSDL declares them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Param<'a> {
    /// A data object: `<tns:{name}><ns6:{field}>value</ns6:{field}>...</tns:{name}>`.
    Object {
        /// The parameter's name (`ctx`, `usrdata`, `grp`, one of `users`, ...).
        name: &'a str,
        /// Its fields, in order.
        fields: Vec<(&'a str, String)>,
    },
    /// A simple value: `<tns:{name}>value</tns:{name}>`.
    Text {
        /// The parameter's name.
        name: &'a str,
        /// Its value.
        value: String,
    },
    /// The credentials (`<tns:auth>` with `login` and `password`).
    Auth,
}

impl<'a> Param<'a> {
    /// A data object with an `id` field only (a context, a user or a group named by id).
    pub fn id(name: &'a str, id: u32) -> Self {
        Param::Object {
            name,
            fields: vec![("id", id.to_string())],
        }
    }
}

/// Why a request cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// A value holds a character XML cannot carry.
    #[error("the {what} contains the character U+{code:04X}, which XML 1.0 cannot carry")]
    InvalidValue {
        /// Which value (never the value itself: it may be the password).
        what: String,
        /// The offending character.
        code: u32,
    },
    /// The writer failed (it writes into memory, so this is a bug).
    #[error("cannot write the request {op}: {message}")]
    Write {
        /// The operation.
        op: String,
        /// The writer's error.
        message: String,
    },
}

fn check_chars(what: &str, value: &str) -> Result<(), EnvelopeError> {
    match value.chars().find(|c| !is_xml_char(*c)) {
        Some(c) => Err(EnvelopeError::InvalidValue {
            what: what.to_string(),
            code: u32::from(c),
        }),
        None => Ok(()),
    }
}

/// The characters XML 1.0 allows in a document.
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Escapes a text value: quick-xml escapes `<`, `>`, `&`, `'` and `"`; a carriage return is
/// written as a character reference so that the parser's line-end normalization keeps it.
fn escaped(value: &str) -> Cow<'_, str> {
    let e = escape(value);
    if e.contains('\r') {
        Cow::Owned(e.replace('\r', "&#13;"))
    } else {
        e
    }
}

/// The request document of `op` with `params`; `login` and `password` fill [`Param::Auth`].
pub fn envelope(
    op: &str,
    params: &[Param<'_>],
    login: &str,
    password: &str,
) -> Result<Vec<u8>, EnvelopeError> {
    check_chars("login", login)?;
    check_chars("password", password)?;
    for p in params {
        match p {
            Param::Object { name, fields } => {
                for (field, value) in fields {
                    check_chars(&format!("{name}.{field}"), value)?;
                }
            }
            Param::Text { name, value } => check_chars(name, value)?,
            Param::Auth => {}
        }
    }
    let write = || -> std::io::Result<Vec<u8>> {
        let mut w = Writer::new(Vec::new());
        w.write_event(Event::Start(
            BytesStart::new("soapenv:Envelope").with_attributes([("xmlns:soapenv", SOAP_ENV)]),
        ))?;
        w.write_event(Event::Start(BytesStart::new("soapenv:Body")))?;
        let wrapper = format!("tns:{op}");
        w.write_event(Event::Start(
            BytesStart::new(wrapper.as_str()).with_attributes([
                ("xmlns:tns", TNS),
                ("xmlns:ns2", DO_RMI),
                ("xmlns:ns6", DO_SOAP),
            ]),
        ))?;
        for p in params {
            match p {
                Param::Object { name, fields } => {
                    let tag = format!("tns:{name}");
                    w.write_event(Event::Start(BytesStart::new(tag.as_str())))?;
                    for (field, value) in fields {
                        text(&mut w, &format!("ns6:{field}"), value)?;
                    }
                    w.write_event(Event::End(BytesEnd::new(tag.as_str())))?;
                }
                Param::Text { name, value } => text(&mut w, &format!("tns:{name}"), value)?,
                Param::Auth => {
                    w.write_event(Event::Start(BytesStart::new("tns:auth")))?;
                    text(&mut w, "ns2:login", login)?;
                    text(&mut w, "ns2:password", password)?;
                    w.write_event(Event::End(BytesEnd::new("tns:auth")))?;
                }
            }
        }
        w.write_event(Event::End(BytesEnd::new(wrapper.as_str())))?;
        w.write_event(Event::End(BytesEnd::new("soapenv:Body")))?;
        w.write_event(Event::End(BytesEnd::new("soapenv:Envelope")))?;
        Ok(w.into_inner())
    };
    write().map_err(|e| EnvelopeError::Write {
        op: op.to_string(),
        message: e.to_string(),
    })
}

fn text(w: &mut Writer<Vec<u8>>, tag: &str, value: &str) -> std::io::Result<()> {
    w.write_event(Event::Start(BytesStart::new(tag)))?;
    w.write_event(Event::Text(BytesText::from_escaped(escaped(value))))?;
    w.write_event(Event::End(BytesEnd::new(tag)))?;
    Ok(())
}

/// One element of an answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    /// Its namespace URI, if any.
    pub ns: Option<String>,
    /// Its local name.
    pub name: String,
    /// `xsi:nil="true"`.
    pub nil: bool,
    /// The text directly inside it (entities resolved).
    pub text: String,
    /// Its child elements, in order.
    pub children: Vec<Element>,
}

impl Element {
    /// Whether it is `{ns}name`.
    pub fn is(&self, ns: &str, name: &str) -> bool {
        self.name == name && self.ns.as_deref() == Some(ns)
    }

    /// The text of the first direct child called `name` (any namespace) that is not nil.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.children
            .iter()
            .find(|c| c.name == name && !c.nil)
            .map(|c| c.text.as_str())
    }

    /// The texts of every direct child called `name` that is not nil.
    pub fn fields<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.children
            .iter()
            .filter(move |c| c.name == name && !c.nil)
            .map(|c| c.text.as_str())
    }
}

/// How deep an answer's elements may nest. OX's answers nest less than ten deep; a deeper one
/// is refused before its tree (built and dropped recursively) could exhaust a worker's stack.
pub const MAX_DEPTH: usize = 64;

/// Why a document cannot be read as an answer: not UTF-8, not well-formed XML, deeper than
/// [`MAX_DEPTH`], not a SOAP envelope, or a data object without a field it needs. The message
/// says what and where; the client reports it as an unexpected answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// Parses a document into its root element.
pub fn parse(xml: &[u8]) -> Result<Element, ParseError> {
    let text = std::str::from_utf8(xml)
        .map_err(|e| ParseError(format!("the answer is not UTF-8: {e}")))?;
    let mut reader = NsReader::from_str(text);
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    loop {
        let position = reader.buffer_position();
        let (resolved, event) = reader
            .read_resolved_event()
            .map_err(|e| ParseError(format!("not well-formed XML after byte {position}: {e}")))?;
        let ns = match resolved {
            ResolveResult::Bound(ns) => Some(String::from_utf8_lossy(ns.as_ref()).into_owned()),
            ResolveResult::Unbound => None,
            ResolveResult::Unknown(prefix) => {
                return Err(ParseError(format!(
                    "undeclared namespace prefix {:?}",
                    String::from_utf8_lossy(&prefix)
                )));
            }
        };
        match event {
            Event::Start(start) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(ParseError(format!(
                        "elements nested more than {MAX_DEPTH} deep after byte {position}"
                    )));
                }
                stack.push(open(&reader, &start, ns)?);
            }
            Event::Empty(start) => {
                let element = open(&reader, &start, ns)?;
                attach(&mut stack, &mut root, element)?;
            }
            Event::End(_) => {
                let element = stack
                    .pop()
                    .ok_or_else(|| ParseError("an end tag without a start tag".to_string()))?;
                attach(&mut stack, &mut root, element)?;
            }
            Event::Text(t) => {
                let content = t
                    .xml10_content()
                    .map_err(|e| ParseError(format!("bad text: {e}")))?;
                push_text(&mut stack, &content)?;
            }
            Event::CData(t) => {
                let content = t
                    .xml10_content()
                    .map_err(|e| ParseError(format!("bad CDATA: {e}")))?;
                push_text(&mut stack, &content)?;
            }
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    Ok(None) => {
                        let name = r
                            .decode()
                            .map_err(|e| ParseError(format!("bad entity: {e}")))?;
                        resolve_predefined_entity(&name)
                            .ok_or_else(|| ParseError(format!("unknown entity &{name};")))?
                            .to_string()
                    }
                    Err(e) => return Err(ParseError(format!("bad character reference: {e}"))),
                };
                push_text(&mut stack, &resolved)?;
            }
            Event::Eof => break,
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
        }
    }
    if !stack.is_empty() {
        return Err(ParseError(
            "the document ends inside an element".to_string(),
        ));
    }
    root.ok_or_else(|| ParseError("the answer holds no XML element".to_string()))
}

fn push_text(stack: &mut [Element], content: &str) -> Result<(), ParseError> {
    match stack.last_mut() {
        Some(top) => {
            top.text.push_str(content);
            Ok(())
        }
        None if content.trim().is_empty() => Ok(()),
        None => Err(ParseError("text outside the root element".to_string())),
    }
}

fn open(
    reader: &NsReader<&[u8]>,
    start: &BytesStart<'_>,
    ns: Option<String>,
) -> Result<Element, ParseError> {
    let name = String::from_utf8_lossy(start.local_name().as_ref()).into_owned();
    let mut nil = false;
    for attr in start.attributes() {
        let attr = attr.map_err(|e| ParseError(format!("bad attribute on <{name}>: {e}")))?;
        let (attr_ns, local) = reader.resolver().resolve_attribute(attr.key);
        if let ResolveResult::Bound(attr_ns) = attr_ns
            && attr_ns.as_ref() == XSI.as_bytes()
            && local.as_ref() == b"nil"
        {
            let value = attr.value.as_ref();
            nil = value == b"true" || value == b"1";
        }
    }
    Ok(Element {
        ns,
        name,
        nil,
        ..Element::default()
    })
}

fn attach(
    stack: &mut [Element],
    root: &mut Option<Element>,
    element: Element,
) -> Result<(), ParseError> {
    if let Some(parent) = stack.last_mut() {
        parent.children.push(element);
        Ok(())
    } else if root.is_none() {
        *root = Some(element);
        Ok(())
    } else {
        Err(ParseError("more than one root element".to_string()))
    }
}

/// A SOAP fault as the server sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoapFault {
    /// `faultcode`, e.g. `soap:Server`.
    pub code: String,
    /// `faultstring`, e.g. `No such user 99 in context 1; exceptionId -1368829551-1`.
    pub faultstring: String,
    /// The exception the `detail` names, e.g. `NoSuchUserException`.
    pub exception: Option<String>,
}

impl SoapFault {
    /// The message without OX's `; exceptionId ...` suffix.
    pub fn message(&self) -> &str {
        match self.faultstring.rfind("; exceptionId") {
            Some(at) => self.faultstring[..at].trim_end(),
            None => self.faultstring.trim(),
        }
    }

    /// The server refused the credentials (or, as OX answers it, the context does not exist).
    pub fn is_authentication(&self) -> bool {
        self.exception.as_deref() == Some("InvalidCredentialsException")
            || self.message() == "Authentication failed"
    }

    /// The server refuses to rename users (`USERNAME_CHANGEABLE=false`).
    pub fn is_username_not_changeable(&self) -> bool {
        self.message().contains("Changing username is disabled")
    }

    /// The object (user, group, context) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.exception.as_deref(),
            Some("NoSuchUserException" | "NoSuchObjectException" | "NoSuchContextException")
        ) || self.message().starts_with("No such ")
            || self.message().contains("NoSuchObjectException")
    }
}

/// What an answer carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The `<return>` elements of the response wrapper, in order: none for a void operation
    /// (or an empty `<soap:Body/>`) and for an empty list.
    Returns(Vec<Element>),
    /// A fault.
    Fault(SoapFault),
}

/// Reads an answer document: its Body's fault, or the `<return>` elements of its response
/// wrapper.
pub fn read_answer(xml: &[u8]) -> Result<Answer, ParseError> {
    let root = parse(xml)?;
    if !root.is(SOAP_ENV, "Envelope") {
        return Err(ParseError(format!(
            "not a SOAP 1.1 envelope: the root element is {{{}}}{}",
            root.ns.as_deref().unwrap_or(""),
            root.name
        )));
    }
    let body = root
        .children
        .into_iter()
        .find(|c| c.is(SOAP_ENV, "Body"))
        .ok_or_else(|| ParseError("the envelope has no Body".to_string()))?;
    let Some(first) = body.children.into_iter().next() else {
        return Ok(Answer::Returns(Vec::new()));
    };
    if first.is(SOAP_ENV, "Fault") {
        let exception = first
            .children
            .iter()
            .find(|c| c.name == "detail")
            .and_then(|d| d.children.first())
            .map(|e| e.name.clone());
        return Ok(Answer::Fault(SoapFault {
            code: first
                .field("faultcode")
                .unwrap_or_default()
                .trim()
                .to_string(),
            faultstring: first.field("faultstring").unwrap_or_default().to_string(),
            exception,
        }));
    }
    if !first.name.ends_with("Response") {
        return Err(ParseError(format!(
            "the Body holds <{}> where a response or a fault belongs",
            first.name
        )));
    }
    Ok(Answer::Returns(
        first
            .children
            .into_iter()
            .filter(|c| c.name == "return")
            .collect(),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_nested_deeper_than_any_ox_answer_is_refused_not_built() {
        let nested = |n: usize| format!("{}x{}", "<a>".repeat(n), "</a>".repeat(n));
        assert!(parse(nested(MAX_DEPTH).as_bytes()).is_ok());
        // 200,000 deep: built and dropped recursively, this tree would overflow the stack.
        let err = parse(nested(200_000).as_bytes()).unwrap_err();
        assert!(err.0.contains("nested more than 64 deep"), "{err}");
    }

    #[test]
    fn envelopes_escape_every_value_and_parse_back() {
        let xml = envelope(
            "change",
            &[
                Param::id("ctx", 1),
                Param::Object {
                    name: "grp",
                    fields: vec![("id", "7".into()), ("name", "R&D <\"Team's\">\r\n".into())],
                },
                Param::Auth,
            ],
            "ad<min>",
            "p&w\"'<>",
        )
        .unwrap();
        let text = String::from_utf8(xml.clone()).unwrap();
        assert!(
            text.contains("R&amp;D &lt;&quot;Team&apos;s&quot;&gt;&#13;\n"),
            "{text}"
        );
        assert!(!text.contains("p&w"), "{text}");
        let root = parse(&xml).unwrap();
        assert!(root.is(SOAP_ENV, "Envelope"));
        let op = &root.children[0].children[0];
        assert!(op.is(TNS, "change"));
        let names: Vec<&str> = op.children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ctx", "grp", "auth"]);
        assert!(op.children.iter().all(|c| c.ns.as_deref() == Some(TNS)));
        let grp = &op.children[1];
        assert_eq!(grp.children[1].ns.as_deref(), Some(DO_SOAP));
        assert_eq!(grp.field("name"), Some("R&D <\"Team's\">\r\n"));
        let auth = &op.children[2];
        assert_eq!(auth.children[0].ns.as_deref(), Some(DO_RMI));
        assert_eq!(auth.field("login"), Some("ad<min>"));
        assert_eq!(auth.field("password"), Some("p&w\"'<>"));
    }

    /// Found by the `ox_soap_response` fuzz target: U+0085 (NEL) and U+2028 are line ends only
    /// in XML 1.1; OX speaks XML 1.0, where they are characters like any other. Read with
    /// XML 1.1's line-end normalization, a name holding one came back with `\n` in its place
    /// (and an action writing it back would have changed it).
    #[test]
    fn xml_1_1_line_ends_are_characters_in_values() {
        let value = "a\u{85}@\u{2028}b";
        let xml = envelope(
            "change",
            &[Param::Object {
                name: "usrdata",
                fields: vec![("name", value.into())],
            }],
            "admin",
            "pw",
        )
        .unwrap();
        let root = parse(&xml).unwrap();
        let usrdata = &root.children[0].children[0].children[0];
        assert_eq!(usrdata.field("name"), Some(value));
        let answer = format!(
            "<e:Envelope xmlns:e=\"{SOAP_ENV}\"><e:Body><r xmlns=\"{TNS}\">{value}\r\n</r></e:Body></e:Envelope>"
        );
        let root = parse(answer.as_bytes()).unwrap();
        assert_eq!(
            root.children[0].children[0].text,
            format!("{value}\n"),
            "XML 1.0 normalizes only CR LF and CR"
        );
    }

    #[test]
    fn values_xml_cannot_carry_are_refused_without_showing_them() {
        let err = envelope("listAll", &[Param::Auth], "admin", "se\u{1}cret").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the password contains the character U+0001, which XML 1.0 cannot carry"
        );
        let err = envelope(
            "change",
            &[Param::Object {
                name: "usrdata",
                fields: vec![("name", "a\u{0}".into())],
            }],
            "admin",
            "pw",
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("the usrdata.name contains"),
            "{err}"
        );
    }

    #[test]
    fn answers_are_read_by_namespace_whatever_the_prefixes() {
        let xml = br#"<S:Envelope xmlns:S="http://schemas.xmlsoap.org/soap/envelope/"><S:Body>
<ns1:getMultipleDataResponse xmlns:ns1="http://soap.admin.openexchange.com" xmlns:d="http://dataobjects.soap.admin.openexchange.com/xsd" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">
 <ns1:return><d:id>3</d:id><d:name>a&amp;b&#x3C;</d:name><d:display_name i:nil="true"/>
  <d:userAttributes><d:entries><d:key>name</d:key><d:value>nested</d:value></d:entries></d:userAttributes></ns1:return>
 <ns1:return><d:id>4</d:id><d:name i:nil="true"/></ns1:return>
</ns1:getMultipleDataResponse></S:Body></S:Envelope>"#;
        let Answer::Returns(returns) = read_answer(xml).unwrap() else {
            panic!("not returns")
        };
        assert_eq!(returns.len(), 2);
        assert_eq!(returns[0].field("name"), Some("a&b<"));
        assert_eq!(returns[0].field("display_name"), None);
        assert_eq!(returns[1].field("name"), None, "nil is absent");
        assert_eq!(returns[1].field("id"), Some("4"));
    }

    #[test]
    fn void_and_empty_answers_have_no_returns() {
        let empty_body = br#"<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body/></soap:Envelope>"#;
        assert_eq!(read_answer(empty_body).unwrap(), Answer::Returns(vec![]));
        let void = br#"<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><changeResponse xmlns="http://soap.admin.openexchange.com"/></soap:Body></soap:Envelope>"#;
        assert_eq!(read_answer(void).unwrap(), Answer::Returns(vec![]));
        let scalar = br#"<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><getAdminIdResponse xmlns="http://soap.admin.openexchange.com"><return>2</return></getAdminIdResponse></soap:Body></soap:Envelope>"#;
        let Answer::Returns(r) = read_answer(scalar).unwrap() else {
            panic!()
        };
        assert_eq!(r[0].text, "2");
    }

    #[test]
    fn faults_carry_faultstring_and_exception() {
        let xml = br#"<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><soap:Fault>
 <faultcode>soap:Server</faultcode>
 <faultstring>Changing username is disabled!; exceptionId -225208343-74</faultstring>
 <detail><InvalidDataException xmlns="http://soap.admin.openexchange.com" xmlns:ns5="http://exceptions.rmi.admin.openexchange.com/xsd" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
   <InvalidDataException><Exception xsi:nil="true"/><ns5:objectname xsi:nil="true"/></InvalidDataException>
 </InvalidDataException></detail>
</soap:Fault></soap:Body></soap:Envelope>"#;
        let Answer::Fault(f) = read_answer(xml).unwrap() else {
            panic!("not a fault")
        };
        assert_eq!(f.code, "soap:Server");
        assert_eq!(f.exception.as_deref(), Some("InvalidDataException"));
        assert_eq!(f.message(), "Changing username is disabled!");
        assert!(f.is_username_not_changeable());
        assert!(!f.is_authentication());
        let auth = SoapFault {
            code: "soap:Server".into(),
            faultstring: "Authentication failed; exceptionId 1-2".into(),
            exception: None,
        };
        assert!(auth.is_authentication());
        let missing = SoapFault {
            code: "soap:Server".into(),
            faultstring: "No such user 99 in context 1; exceptionId 1-3".into(),
            exception: Some("NoSuchUserException".into()),
        };
        assert!(missing.is_not_found());
    }

    #[test]
    fn malformed_answers_are_errors() {
        assert!(read_answer(b"<html>502 Bad Gateway</html>").is_err());
        assert!(read_answer(b"not xml at all").is_err());
        assert!(read_answer(b"<x:a/>").is_err());
        let other = br#"<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><foo/></soap:Body></soap:Envelope>"#;
        assert!(read_answer(other).is_err());
    }
}
