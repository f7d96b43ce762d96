//! SOAP 1.1 envelopes for the OX simulator: a namespace-aware reader into a small element tree,
//! and a writer (quick-xml, so every value is escaped) for responses and faults.

use std::io;

use quick_xml::Writer;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::{BytesEnd, BytesStart, BytesText, Event};
use quick_xml::name::ResolveResult;
use quick_xml::reader::NsReader;

/// The SOAP 1.1 envelope namespace.
pub const SOAP_ENV: &str = "http://schemas.xmlsoap.org/soap/envelope/";
/// The SOAP 1.2 envelope namespace (answered with a `VersionMismatch` fault).
pub const SOAP12_ENV: &str = "http://www.w3.org/2003/05/soap-envelope";
/// Operations, their parameters and exception elements.
pub const TNS: &str = "http://soap.admin.openexchange.com";
/// `Context`, `User`, `Group` and the other data objects.
pub const DO_SOAP: &str = "http://dataobjects.soap.admin.openexchange.com/xsd";
/// `Credentials`.
pub const DO_RMI: &str = "http://dataobjects.rmi.admin.openexchange.com/xsd";
/// Exception payloads.
pub const EXCEPTIONS: &str = "http://exceptions.rmi.admin.openexchange.com/xsd";
/// `xsi:nil`.
pub const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// One element of a parsed document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Element {
    /// The namespace it is in, if any.
    pub ns: Option<String>,
    /// The local name.
    pub name: String,
    /// `xsi:nil="true"`.
    pub nil: bool,
    /// The text directly inside it.
    pub text: String,
    /// The child elements, in order.
    pub children: Vec<Element>,
}

impl Element {
    /// Whether this is `{ns}name`.
    pub fn is(&self, ns: &str, name: &str) -> bool {
        self.name == name && self.ns.as_deref() == Some(ns)
    }

    /// The children named `{ns}name` that are not nil.
    pub fn all<'a>(&'a self, ns: &'a str, name: &'a str) -> impl Iterator<Item = &'a Element> {
        self.children
            .iter()
            .filter(move |c| c.is(ns, name) && !c.nil)
    }

    /// The first child named `{ns}name` that is not nil.
    pub fn first(&self, ns: &str, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.is(ns, name) && !c.nil)
    }

    /// A data-object field: the first non-nil child `name` in either data-object namespace.
    pub fn field(&self, name: &str) -> Option<&Element> {
        self.children
            .iter()
            .find(|c| c.name == name && !c.nil && is_data_ns(c.ns.as_deref()))
    }

    /// The text of a data-object field.
    pub fn field_text(&self, name: &str) -> Option<&str> {
        self.field(name).map(|e| e.text.as_str())
    }

    /// The first element child, whatever its name.
    pub fn first_element(&self) -> Option<&Element> {
        self.children.first()
    }
}

fn is_data_ns(ns: Option<&str>) -> bool {
    matches!(ns, Some(DO_SOAP) | Some(DO_RMI))
}

/// Parses a document into its root element; answers what is wrong when it is not well-formed
/// XML or uses an undeclared prefix.
pub fn parse(xml: &[u8]) -> Result<Element, String> {
    let text = std::str::from_utf8(xml).map_err(|e| format!("the body is not UTF-8: {e}"))?;
    let mut reader = NsReader::from_str(text);
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    loop {
        let position = reader.buffer_position();
        let (resolved, event) = reader
            .read_resolved_event()
            .map_err(|e| format!("not well-formed XML after byte {position}: {e}"))?;
        let ns = match resolved {
            ResolveResult::Bound(ns) => Some(String::from_utf8_lossy(ns.as_ref()).into_owned()),
            ResolveResult::Unbound => None,
            ResolveResult::Unknown(prefix) => {
                return Err(format!(
                    "undeclared namespace prefix '{}'",
                    String::from_utf8_lossy(&prefix)
                ));
            }
        };
        match event {
            Event::Start(start) => {
                let element = open(&reader, &start, ns)?;
                stack.push(element);
            }
            Event::Empty(start) => {
                let element = open(&reader, &start, ns)?;
                attach(&mut stack, &mut root, element)?;
            }
            Event::End(_) => {
                let element = stack
                    .pop()
                    .ok_or_else(|| "an end tag without a start tag".to_string())?;
                attach(&mut stack, &mut root, element)?;
            }
            Event::Text(t) => {
                let content = t.xml10_content().map_err(|e| format!("bad text: {e}"))?;
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&content);
                } else if !content.trim().is_empty() {
                    return Err("text outside the root element".to_string());
                }
            }
            Event::CData(t) => {
                let content = t.xml10_content().map_err(|e| format!("bad CDATA: {e}"))?;
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&content);
                }
            }
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    Ok(None) => {
                        let name = r.decode().map_err(|e| format!("bad entity: {e}"))?;
                        resolve_predefined_entity(&name)
                            .ok_or_else(|| format!("unknown entity &{name};"))?
                            .to_string()
                    }
                    Err(e) => return Err(format!("bad character reference: {e}")),
                };
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&resolved);
                }
            }
            Event::Eof => break,
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) | Event::DocType(_) => {}
        }
    }
    if !stack.is_empty() {
        return Err("the document ends inside an element".to_string());
    }
    root.ok_or_else(|| "the body holds no XML element".to_string())
}

fn open(
    reader: &NsReader<&[u8]>,
    start: &BytesStart<'_>,
    ns: Option<String>,
) -> Result<Element, String> {
    let name = String::from_utf8_lossy(start.local_name().as_ref()).into_owned();
    let mut nil = false;
    for attr in start.attributes() {
        let attr = attr.map_err(|e| format!("bad attribute on <{name}>: {e}"))?;
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
) -> Result<(), String> {
    if let Some(parent) = stack.last_mut() {
        parent.children.push(element);
        Ok(())
    } else if root.is_none() {
        *root = Some(element);
        Ok(())
    } else {
        Err("more than one root element".to_string())
    }
}

/// Writes a response document. Every text and attribute value goes through quick-xml's
/// escaping.
pub struct XmlOut {
    w: Writer<Vec<u8>>,
}

impl std::fmt::Debug for XmlOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XmlOut").finish_non_exhaustive()
    }
}

impl Default for XmlOut {
    fn default() -> Self {
        Self::new()
    }
}

impl XmlOut {
    /// An empty document (no XML declaration, as the real server's answers).
    pub fn new() -> Self {
        XmlOut {
            w: Writer::new(Vec::new()),
        }
    }

    /// `<name attrs…>`.
    pub fn start(&mut self, name: &str, attrs: &[(&str, &str)]) -> io::Result<()> {
        let start = BytesStart::new(name).with_attributes(attrs.iter().copied());
        self.w.write_event(Event::Start(start))
    }

    /// `</name>`.
    pub fn end(&mut self, name: &str) -> io::Result<()> {
        self.w.write_event(Event::End(BytesEnd::new(name)))
    }

    /// `<name attrs…/>`.
    pub fn empty(&mut self, name: &str, attrs: &[(&str, &str)]) -> io::Result<()> {
        let start = BytesStart::new(name).with_attributes(attrs.iter().copied());
        self.w.write_event(Event::Empty(start))
    }

    /// `<name>text</name>`, the text escaped.
    pub fn text(&mut self, name: &str, text: &str) -> io::Result<()> {
        self.start(name, &[])?;
        self.w.write_event(Event::Text(BytesText::new(text)))?;
        self.end(name)
    }

    /// `<name xsi:nil="true"/>` (the `xsi` prefix must be declared by an ancestor).
    pub fn nil(&mut self, name: &str) -> io::Result<()> {
        self.empty(name, &[("xsi:nil", "true")])
    }

    /// `<name>text</name>` for `Some`, a nil element for `None`.
    pub fn opt(&mut self, name: &str, text: Option<&str>) -> io::Result<()> {
        match text {
            Some(t) => self.text(name, t),
            None => self.nil(name),
        }
    }

    /// The document.
    pub fn finish(self) -> Vec<u8> {
        self.w.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prefixed_envelopes_with_entities_and_nil() {
        let xml = br#"<?xml version="1.0"?>
<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
 <soapenv:Body>
  <ns1:getData xmlns:ns1="http://soap.admin.openexchange.com" xmlns:x="http://dataobjects.soap.admin.openexchange.com/xsd">
   <ns1:user><x:name>a&amp;b&#x41;<![CDATA[<c>]]></x:name><x:id xsi:nil="true"/></ns1:user>
  </ns1:getData>
 </soapenv:Body>
</soapenv:Envelope>"#;
        let root = parse(xml).unwrap_or_default();
        assert!(root.is(SOAP_ENV, "Envelope"));
        let body = root.first(SOAP_ENV, "Body").cloned().unwrap_or_default();
        let op = body.first_element().cloned().unwrap_or_default();
        assert!(op.is(TNS, "getData"));
        let user = op.first(TNS, "user").cloned().unwrap_or_default();
        assert_eq!(user.field_text("name"), Some("a&bA<c>"));
        assert_eq!(user.field("id"), None, "nil fields count as absent");
    }

    #[test]
    fn rejects_malformed_and_undeclared_prefixes() {
        assert!(parse(b"<a><b></a>").is_err());
        assert!(parse(b"<x:a/>").is_err());
        assert!(parse(b"").is_err());
    }

    #[test]
    fn writer_escapes_values() {
        let mut out = XmlOut::new();
        let _ = out.text("n", "<&>\"'");
        let text = String::from_utf8(out.finish()).unwrap_or_default();
        assert!(text.contains("<n>&lt;&amp;&gt;"), "{text}");
        assert!(parse(text.as_bytes()).is_ok());
    }
}
