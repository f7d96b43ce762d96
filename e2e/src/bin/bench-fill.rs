//! Benchmark set-up: creates many objects of a CRD quickly (concurrent POSTs), so that a
//! benchmark spends its time on what it measures.
//!
//! `bench-fill GROUP VERSION KIND PLURAL NAMESPACE COUNT [CONCURRENCY]` creates objects named
//! `w-00000`… with `spec: {endpoint, port}` through the current kubeconfig.

use futures::{StreamExt, stream};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 6 {
        eprintln!("usage: bench-fill GROUP VERSION KIND PLURAL NAMESPACE COUNT [CONCURRENCY]");
        return std::process::ExitCode::from(2);
    }
    let (Ok(count), Ok(concurrency)) = (
        args[5].parse::<usize>(),
        args.get(6).map_or(Ok(32), |c| c.parse::<usize>()),
    ) else {
        eprintln!("bench-fill: COUNT and CONCURRENCY must be numbers");
        return std::process::ExitCode::from(2);
    };
    let runtime = match stagehand_e2e::bench_runtime("bench-fill") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    runtime.block_on(async {
        let client = match kube::Client::try_default().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("bench-fill: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        let gvk = GroupVersionKind::gvk(&args[0], &args[1], &args[2]);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &args[3]);
        let api: Api<DynamicObject> = Api::namespaced_with(client, &args[4], &resource);
        let failures = stream::iter(0..count)
            .map(|i| {
                let api = api.clone();
                let resource = resource.clone();
                async move {
                    let mut object = DynamicObject::new(&format!("w-{i:05}"), &resource);
                    object.data = serde_json::json!({"spec": {"endpoint": format!("10.0.{}.{}", i / 250, i % 250), "port": 4789}});
                    api.create(&PostParams::default(), &object).await.err()
                }
            })
            .buffer_unordered(concurrency.max(1))
            .filter_map(|e| async move { e })
            .collect::<Vec<_>>()
            .await;
        if let Some(e) = failures.first() {
            eprintln!("bench-fill: {} of {count} creations failed, e.g. {e}", failures.len());
            return std::process::ExitCode::FAILURE;
        }
        std::process::ExitCode::SUCCESS
    })
}
