//! The kill matrix of the Functional → Shared Accounts pair, through the operator on the local
//! control plane, against the UDM REST and OX SOAP simulators and a real MinIO (the `World` of
//! `stagehand_e2e::functional_accounts`, a fresh one per case). See
//! `stagehand_e2e::kill_matrix` for the kill points and what a case must show.
//!
//! - `ox_functional_accounts_export` (pre): the destructive requests are, in the order the
//!   action sends them, the handover's write (a `PUT` MinIO served), the SOAP `delete`s of the
//!   accounts' secondary accounts (one per mailbox) and the UDM `DELETE`s of the Functional
//!   Accounts (one per account). The simulators' fault rules hold the next SOAP delete or UDM
//!   delete once `k` were served.
//! - `ox_shared_accounts_import`: the destructive requests are the UDM `POST`s that create the
//!   Shared Accounts (each carries its users' links, so there is no separate link request).
//!   Its stage is `post` in openDesk, where the run engine waits for the release's pre run; the
//!   matrix declares it in `pre` (validation allows it) after exporting with the library, so the
//!   run under test is the import alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use stagehand_e2e::functional_accounts::{EXPORT, IMPORT, KEY, Seeded, World, small_fixture};
use stagehand_e2e::kill_matrix::{KubeTrip, Target, case, points, report};
use stagehand_e2e::kube_proxy::{KubeProxy, Seen};
use stagehand_e2e::{client, install_crds};
use stagehand_simulators::http::FaultRule;

const FA_PATH: &str = "/univention/udm/oxmail/functional_account/";
const SA_PATH: &str = "/univention/udm/oxmail/shared_account/";
const SECONDARY: &str = "/webservices/OXSecondaryAccountService";

/// Runs one of the `World`'s assertions, answering its panic message instead of panicking.
fn check(what: impl FnOnce()) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(what)).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "an assertion failed".into())
    })
}

/// A fresh world seeded with the small fixture (four accounts, three with mailboxes).
async fn seeded_world() -> (World, Seeded) {
    let world = World::start().await;
    let (users, accounts) = small_fixture();
    let seeded = world.seed(&users, &accounts, true);
    (world, seeded)
}

/// The handover writes MinIO served (past the fault proxy, unchanged).
fn handover_writes(world: &World) -> Vec<String> {
    world
        .proxy
        .requests()
        .into_iter()
        .filter(|(method, path, fault)| method == "PUT" && path.ends_with(KEY) && fault.is_none())
        .map(|(_, path, _)| format!("handover {path}"))
        .collect()
}

fn soap_deletes(world: &World) -> Vec<String> {
    world
        .ox
        .requests()
        .into_iter()
        .filter(|r| r.op.as_deref() == Some("delete") && r.status.is_some())
        .map(|r| r.object.unwrap_or(r.path))
        .collect()
}

fn udm_deletes(world: &World) -> Vec<String> {
    world
        .udm
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.status.is_some())
        .map(|r| r.path)
        .collect()
}

/// `ox_functional_accounts_export`: one handover write, a SOAP delete per mailbox, a UDM delete
/// per account.
struct Export {
    world: Option<(World, Seeded)>,
    /// SOAP deletes of an uninterrupted run.
    soap: usize,
    /// UDM deletes of an uninterrupted run.
    udm: usize,
}

impl Export {
    fn world(&self) -> &(World, Seeded) {
        self.world.as_ref().expect("prepared")
    }
}

impl Target for Export {
    fn id(&self) -> &'static str {
        EXPORT
    }
    fn stage(&self) -> &'static str {
        "pre"
    }
    fn destructive_total(&self) -> usize {
        1 + self.soap + self.udm
    }
    async fn prepare(&mut self, ns: &str) -> String {
        self.world = None;
        let (world, seeded) = seeded_world().await;
        world.create_secrets(ns);
        let migration = world.migration(ns);
        self.world = Some((world, seeded));
        migration
    }
    async fn hold_after(&mut self, _ns: &str, k: usize) -> Option<KubeTrip> {
        let (world, _) = self.world();
        if k <= self.soap {
            // The handover and k - 1 SOAP deletes served: the k-th SOAP delete and every
            // later one hang unanswered and are not carried out (no UDM delete starts before
            // every SOAP delete succeeded).
            world.ox.faults().add(
                FaultRule::path(SECONDARY)
                    .with_op("delete")
                    .from_nth(k as u64)
                    .hang(),
            );
        } else {
            world.udm.faults().add(
                FaultRule::prefix(FA_PATH)
                    .method("DELETE")
                    .from_nth((k - self.soap) as u64)
                    .hang(),
            );
        }
        None
    }
    async fn holding(&self) -> bool {
        let (world, _) = self.world();
        world
            .ox
            .faults()
            .rules()
            .iter()
            .chain(world.udm.faults().rules().iter())
            .any(|r| r.fired > 0)
    }
    async fn release(&mut self) {
        let (world, _) = self.world();
        world.ox.faults().clear();
        world.udm.faults().clear();
    }
    async fn served(&self, _ns: &str, _log: &[Seen]) -> Vec<String> {
        let (world, _) = self.world();
        let mut out = handover_writes(world);
        out.extend(soap_deletes(world));
        out.extend(udm_deletes(world));
        out
    }
    async fn check_end_state(&self, _ns: &str) -> Result<(), String> {
        let (world, seeded) = self.world();
        let mut wrong = Vec::new();
        let left = world.functional_accounts().len();
        if left > 0 {
            wrong.push(format!("{left} Functional Accounts left in the IAM"));
        }
        for (spec, _, _) in &seeded.accounts {
            let rows = world.ox_rows(&spec.mail);
            if rows > 0 {
                wrong.push(format!(
                    "{rows} secondary accounts of {} left in OX",
                    spec.mail
                ));
            }
        }
        if world.ox_rows("other@example.org") != 1 {
            wrong.push("the foreign secondary account was removed".into());
        }
        match world.handover() {
            Some(h) if h.accounts.len() == seeded.accounts.len() => {}
            Some(h) => wrong.push(format!("the handover holds {} accounts", h.accounts.len())),
            None => wrong.push("no handover".into()),
        }
        if let Err(e) = check(|| {
            world.assert_every_account_described(seeded);
        }) {
            wrong.push(e);
        }
        wrong
            .is_empty()
            .then_some(())
            .ok_or_else(|| wrong.join("; "))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ox_functional_accounts_export_survives_a_kill_at_every_point() {
    let client = client().await;
    install_crds();
    let proxy = KubeProxy::start().await;

    // What an uninterrupted export sends: the action run once, directly, on a fresh world.
    let (world, seeded) = seeded_world().await;
    world.export().await.unwrap();
    let (writes, soap, udm) = (
        handover_writes(&world).len(),
        soap_deletes(&world).len(),
        udm_deletes(&world).len(),
    );
    assert_eq!(writes, 1, "one handover write");
    assert_eq!(udm, seeded.accounts.len(), "one UDM delete per account");
    assert!(soap >= 2, "a SOAP delete per mailbox: {soap}");
    drop(world);

    let mut target = Export {
        world: None,
        soap,
        udm,
    };
    let mut rows = Vec::new();
    for point in points(target.destructive_total()) {
        rows.push(case(&mut target, &client, &proxy, point).await);
    }
    drop(target);
    report(env!("CARGO_TARGET_TMPDIR"), &rows);
}

/// `ox_shared_accounts_import` after an export made with the library: one UDM create per
/// account of the handover.
struct Import {
    world: Option<(World, Seeded)>,
}

impl Import {
    fn world(&self) -> &(World, Seeded) {
        self.world.as_ref().expect("prepared")
    }
}

fn creates(world: &World) -> Vec<String> {
    world
        .udm
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.starts_with(SA_PATH) && r.status.is_some())
        .map(|r| r.object.unwrap_or(r.path))
        .collect()
}

impl Target for Import {
    fn id(&self) -> &'static str {
        IMPORT
    }
    fn stage(&self) -> &'static str {
        "pre"
    }
    fn destructive_total(&self) -> usize {
        small_fixture().1.len()
    }
    async fn prepare(&mut self, ns: &str) -> String {
        self.world = None;
        let (world, seeded) = seeded_world().await;
        world.export().await.unwrap();
        world.udm.clear_requests();
        world.create_secrets(ns);
        let migration = world.migration_with(ns, &[IMPORT], &[]);
        self.world = Some((world, seeded));
        migration
    }
    async fn hold_after(&mut self, _ns: &str, k: usize) -> Option<KubeTrip> {
        let (world, _) = self.world();
        world.udm.faults().add(
            FaultRule::prefix(SA_PATH)
                .method("POST")
                .from_nth(k as u64 + 1)
                .hang(),
        );
        None
    }
    async fn holding(&self) -> bool {
        let (world, _) = self.world();
        world.udm.faults().rules().iter().any(|r| r.fired > 0)
    }
    async fn release(&mut self) {
        let (world, _) = self.world();
        world.udm.faults().clear();
    }
    async fn served(&self, _ns: &str, _log: &[Seen]) -> Vec<String> {
        creates(&self.world().0)
    }
    async fn check_end_state(&self, _ns: &str) -> Result<(), String> {
        let (world, seeded) = self.world();
        check(|| world.assert_imported_exactly(seeded))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ox_shared_accounts_import_survives_a_kill_at_every_point() {
    let client = client().await;
    install_crds();
    let proxy = KubeProxy::start().await;

    // What an uninterrupted import sends: the action run once, directly, on a fresh world.
    let (world, seeded) = seeded_world().await;
    world.export().await.unwrap();
    world.udm.clear_requests();
    world.import().await.unwrap();
    let sent = creates(&world);
    assert_eq!(
        sent.len(),
        seeded.accounts.len(),
        "one create per account: {sent:?}"
    );
    drop(world);

    let mut target = Import { world: None };
    assert_eq!(target.destructive_total(), sent.len());
    let mut rows = Vec::new();
    for point in points(target.destructive_total()) {
        rows.push(case(&mut target, &client, &proxy, point).await);
    }
    drop(target);
    report(env!("CARGO_TARGET_TMPDIR"), &rows);
}
