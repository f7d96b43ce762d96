//! Reading many objects in few requests: every object of a module below a base, users by DN.

use std::collections::{BTreeMap, BTreeSet};

use super::{Filter, SEARCH_CHUNK, Search, USER, UdmClient, UdmError, UdmObject};
use crate::clients::ldap::dn::{first_rdn_value, norm_dn};

impl UdmClient {
    /// Reads the users `dns` name: by user name (the `uid` of the DN) in searches of
    /// [`SEARCH_CHUNK`] names ([`UdmClient::search_any_of`]), each result matched by DN; DNs the searches do not find are read one
    /// by one. Answers every DN (normalized, see [`norm_dn`]) with its object, or `None` when no
    /// such user exists.
    pub async fn users_by_dn(
        &self,
        base_dn: &str,
        dns: &BTreeSet<String>,
        properties: &[&str],
    ) -> Result<BTreeMap<String, Option<UdmObject>>, UdmError> {
        let mut found: BTreeMap<String, Option<UdmObject>> = BTreeMap::new();
        let wanted: BTreeMap<String, &String> = dns.iter().map(|dn| (norm_dn(dn), dn)).collect();
        let uids: Vec<String> = wanted
            .values()
            .filter_map(|dn| first_rdn_value(dn, "uid"))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for object in self
            .search_any_of(USER, "username", &uids, base_dn, properties)
            .await?
        {
            let key = norm_dn(&object.dn);
            if wanted.contains_key(&key) {
                found.insert(key, Some(object));
            }
        }
        for (key, dn) in &wanted {
            if found.contains_key(key) {
                continue;
            }
            let object = self.get_dn(USER, dn).await?;
            found.insert(key.clone(), object);
        }
        Ok(found)
    }

    /// Every object of `module` below `base_dn` with `properties` (all when empty).
    pub async fn all_objects(
        &self,
        module: &str,
        base_dn: &str,
        properties: &[&str],
    ) -> Result<Vec<UdmObject>, UdmError> {
        self.search_below(module, None, base_dn, properties).await
    }

    /// Every object of `module` below `base_dn` whose `property` is one of `values`, in
    /// searches of [`SEARCH_CHUNK`] values each (`(|(p=a)(p=b)...)`), with `properties`.
    pub async fn search_any_of<S: AsRef<str>>(
        &self,
        module: &str,
        property: &'static str,
        values: &[S],
        base_dn: &str,
        properties: &[&str],
    ) -> Result<Vec<UdmObject>, UdmError> {
        let mut found = Vec::new();
        for chunk in values.chunks(SEARCH_CHUNK) {
            let filter = Filter::or(chunk.iter().map(|v| Filter::eq(property, v.as_ref())));
            found.extend(
                self.search_below(module, Some(filter), base_dn, properties)
                    .await?,
            );
        }
        Ok(found)
    }

    /// One search of `module` below `base_dn`.
    async fn search_below(
        &self,
        module: &str,
        filter: Option<Filter>,
        base_dn: &str,
        properties: &[&str],
    ) -> Result<Vec<UdmObject>, UdmError> {
        self.search_with(
            module,
            &Search {
                filter,
                position: Some(base_dn.to_string()),
                properties: properties.iter().map(|p| p.to_string()).collect(),
                ..Search::default()
            },
        )
        .await
    }
}
