//! The protocol simulators (e2e/simulators) set up the way the operator tests use them.

use crate::secrets::create_secret;

/// A Provisioning API simulator whose admin (`admin`) password is in the Secret `provisioning`
/// (key `password`) of `ns`, holding a subscription of each of `names`.
pub async fn provisioning_sim(
    ns: &str,
    names: &[&str],
) -> stagehand_simulators::provisioning::ProvisioningSim {
    use stagehand_simulators::provisioning::{self, ProvisioningConfig};
    let password = format!("prov-{}-S3cret", std::process::id());
    let sim = match provisioning::start(ProvisioningConfig::new("admin", &password)).await {
        Ok(sim) => sim,
        Err(e) => panic!("starting the Provisioning API simulator: {e}"),
    };
    for name in names {
        sim.state()
            .add_subscription(name, &[("udm", "users/user")], false, "c");
    }
    create_secret(ns, "provisioning", "password", &password);
    sim
}

/// How many DELETE requests the Provisioning API simulator `sim` received.
pub fn provisioning_deletes(sim: &stagehand_simulators::provisioning::ProvisioningSim) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count()
}
