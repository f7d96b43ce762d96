// The sync command: one Argo CD Application sync of a directory of manifests, driven by
// gitops-engine's sync code as Argo CD v3.6.1's application controller drives it
// (controller/sync.go SyncAppState), without the Argo CD server:
//
//   - the live state comes from gitops-engine's cluster cache (pkg/cache) of the destination
//     namespace; the objects of the Application are those whose tracking annotation
//     argocd.argoproj.io/tracking-id names it (Argo CD's default tracking method since v3),
//     which the command writes on every target as Argo CD does;
//   - sync.Reconcile splits hooks from resources and pairs targets with live objects;
//   - every step is a new sync.SyncContext carrying the operation's state forward
//     (WithInitialState), as the controller builds one per reconciliation: PreSync, Sync and
//     PostSync phases, sync waves, hooks with generateName named <generateName><revision[:7]>-
//     <phase>-<started-at unix>, hook-delete-policy, the 2 s delay between waves
//     (ARGOCD_SYNC_WAVE_DELAY);
//   - health is gitops-engine's, with the resource overrides Argo CD's own SettingsManager
//     (util/settings) reads from the argocd-cm ConfigMap of --argocd-namespace on the cluster,
//     through lua.ResourceHealthOverrides: a resource.customizations.health.<group>_<Kind>
//     script decides when a wave or a hook is done.
//
// Left out of Argo CD's path: the repo server (the manifests are a directory), the
// Application object and its status, projects and RBAC, the diff (every target is applied,
// as a sync of an OutOfSync application does), retries and automated sync.
//
//	argocd-health sync --app NAME --namespace NS --argocd-namespace NS --revision REV
//	                   [--timeout DURATION] DIR
//
// Prints the operation's result as JSON ({"phase","message","resources":[...]}) and exits 0
// when the phase is Succeeded, 1 when it is Failed or Error or the timeout passed, 2 on a
// usage error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/cache"
	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/sync"
	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/sync/common"
	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/utils/kube"
	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/utils/tracing"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/textlogger"
)

// trackingAnnotation is Argo CD's resource tracking annotation (common.AnnotationKeyAppInstance),
// its value <app>:<group>/<Kind>:<namespace>/<name> (util/argo resource_tracking.go).
const trackingAnnotation = "argocd.argoproj.io/tracking-id"

type syncOptions struct {
	app, namespace, argocdNamespace, revision, dir string
	timeout                                        time.Duration
}

type resourceResult struct {
	Group     string `json:"group"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	SyncPhase string `json:"syncPhase"`
	HookType  string `json:"hookType,omitempty"`
	Status    string `json:"status"`
	HookPhase string `json:"hookPhase,omitempty"`
	Message   string `json:"message"`
	Order     int    `json:"order"`
}

type syncReport struct {
	Phase     string           `json:"phase"`
	Message   string           `json:"message"`
	Resources []resourceResult `json:"resources"`
}

func syncCommand(args []string, out io.Writer) int {
	fl := flag.NewFlagSet("sync", flag.ContinueOnError)
	var o syncOptions
	fl.StringVar(&o.app, "app", "", "the Application's name (tracking annotation)")
	fl.StringVar(&o.namespace, "namespace", "", "the Application's destination namespace")
	fl.StringVar(&o.argocdNamespace, "argocd-namespace", "", "the namespace of the argocd-cm ConfigMap")
	fl.StringVar(&o.revision, "revision", "", "the revision synced (names generateName hooks)")
	fl.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up (exit 1) after this long")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() != 1 || o.app == "" || o.namespace == "" || o.argocdNamespace == "" || o.revision == "" {
		fmt.Fprintln(os.Stderr, "usage: argocd-health sync --app NAME --namespace NS --argocd-namespace NS --revision REV [--timeout D] DIR")
		return 2
	}
	o.dir = fl.Arg(0)
	report, err := runSync(o)
	if report != nil {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if encErr := enc.Encode(report); encErr != nil && err == nil {
			err = encErr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "argocd-health sync:", err)
		return 1
	}
	if report.Phase != string(common.OperationSucceeded) {
		fmt.Fprintf(os.Stderr, "argocd-health sync: %s: %s\n", report.Phase, report.Message)
		return 1
	}
	return 0
}

// manifests reads every .yaml/.yml/.json file under dir (sorted), as the agent example does.
func manifests(dir string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		items, err := kube.SplitYAML(data)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, items...)
		return nil
	})
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("no manifests under %s", dir)
	}
	return out, err
}

// normalize does what Argo CD's NormalizeTargetObjects does before a sync: a namespaced
// target without a namespace gets the destination namespace, and every target Argo CD's
// tracking annotation (a generateName hook has no name yet: Argo CD writes the empty name
// too). Works on copies.
func normalize(objs []*unstructured.Unstructured, info kube.ResourceInfoProvider, app, namespace string) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, obj := range objs {
		u := obj.DeepCopy()
		namespaced, err := info.IsNamespaced(u.GroupVersionKind().GroupKind())
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		if namespaced && u.GetNamespace() == "" {
			u.SetNamespace(namespace)
		}
		ns := u.GetNamespace()
		gvk := u.GroupVersionKind()
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[trackingAnnotation] = fmt.Sprintf("%s:%s/%s:%s/%s", app, gvk.Group, gvk.Kind, ns, u.GetName())
		u.SetAnnotations(ann)
		out = append(out, u)
	}
	return out, nil
}

type trackInfo struct{ app string }

// healthOverrides reads the resource overrides as the application controller does:
// settings.SettingsManager.GetResourceOverrides over argocd-cm in argocdNamespace.
func healthOverrides(ctx context.Context, config *rest.Config, argocdNamespace string) (lua.ResourceHealthOverrides, error) {
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	mgr := settings.NewSettingsManager(ctx, clientset, argocdNamespace)
	overrides, err := mgr.GetResourceOverrides()
	if err != nil {
		return nil, fmt.Errorf("argocd-cm in namespace %s: %w", argocdNamespace, err)
	}
	return lua.ResourceHealthOverrides(overrides), nil
}

func runSync(o syncOptions) (*syncReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(os.Stderr)))

	objs, err := manifests(o.dir)
	if err != nil {
		return nil, err
	}
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	// The application controller's client rates (ARGOCD_K8S_CLIENT_QPS and _BURST defaults).
	config.QPS, config.Burst = 50, 100
	overrides, err := healthOverrides(ctx, config, o.argocdNamespace)
	if err != nil {
		return nil, err
	}

	clusterCache := cache.NewClusterCache(config,
		cache.SetNamespaces([]string{o.namespace}),
		cache.SetLogr(log),
		cache.SetPopulateResourceInfoHandler(func(un *unstructured.Unstructured, _ bool) (any, bool) {
			app, _, _ := strings.Cut(un.GetAnnotations()[trackingAnnotation], ":")
			return &trackInfo{app: app}, app == o.app
		}),
	)
	if err := clusterCache.EnsureSynced(); err != nil {
		return nil, fmt.Errorf("cluster cache: %w", err)
	}
	defer clusterCache.Invalidate()
	targets, err := normalize(objs, clusterCache, o.app, o.namespace)
	if err != nil {
		return nil, err
	}
	updated := make(chan struct{}, 1)
	unsubscribe := clusterCache.OnResourceUpdated(func(_, _ *cache.Resource, _ map[kube.ResourceKey]*cache.Resource) {
		select {
		case updated <- struct{}{}:
		default:
		}
	})
	defer unsubscribe()
	isManaged := func(r *cache.Resource) bool {
		info, ok := r.Info.(*trackInfo)
		return ok && info.app == o.app
	}

	kubectl := &kube.KubectlCmd{Log: log, Tracer: tracing.NopTracer{}}
	startedAt := metav1.Now()
	var (
		phase   common.OperationPhase
		message string
		results []common.ResourceSyncResult
	)
	for {
		live, err := clusterCache.GetManagedLiveObjs(targets, isManaged)
		if err != nil {
			return nil, fmt.Errorf("live state: %w", err)
		}
		reconciled := sync.Reconcile(targets, live, o.namespace, clusterCache)
		syncCtx, cleanup, err := sync.NewSyncContext(o.revision, reconciled, config, config, kubectl, o.namespace,
			sync.WithLogr(log),
			sync.WithHealthOverride(overrides),
			// dryRun, prune, force, skipHooks: `argocd app sync` with its defaults.
			sync.WithOperationSettings(false, false, false, false),
			sync.WithInitialState(phase, message, results, startedAt),
			sync.WithManifestValidation(true),
			sync.WithSyncWaveHook(delayBetweenSyncWaves),
		)
		if err != nil {
			return nil, fmt.Errorf("sync context: %w", err)
		}
		syncCtx.Sync(ctx)
		phase, message, results = syncCtx.GetState()
		cleanup()
		if phase.Completed() {
			return report(phase, message, results), nil
		}
		select {
		case <-ctx.Done():
			return report(phase, message, results), fmt.Errorf("no result after %s (phase %s: %s)", o.timeout, phase, message)
		case <-updated:
		case <-time.After(time.Second):
		}
	}
}

// delayBetweenSyncWaves is the application controller's (controller/sync.go): 2 s after
// every wave but the last, ARGOCD_SYNC_WAVE_DELAY seconds when set.
func delayBetweenSyncWaves(_ common.SyncPhase, _ int, finalWave bool) error {
	if finalWave {
		return nil
	}
	seconds := 2
	if v, err := strconv.Atoi(os.Getenv("ARGOCD_SYNC_WAVE_DELAY")); err == nil {
		seconds = v
	}
	time.Sleep(time.Duration(seconds) * time.Second)
	return nil
}

func report(phase common.OperationPhase, message string, results []common.ResourceSyncResult) *syncReport {
	r := &syncReport{Phase: string(phase), Message: message, Resources: []resourceResult{}}
	for _, res := range results {
		r.Resources = append(r.Resources, resourceResult{
			Group: res.ResourceKey.Group, Kind: res.ResourceKey.Kind,
			Namespace: res.ResourceKey.Namespace, Name: res.ResourceKey.Name,
			SyncPhase: string(res.SyncPhase), HookType: string(res.HookType),
			Status: string(res.Status), HookPhase: string(res.HookPhase),
			Message: res.Message, Order: res.Order,
		})
	}
	sort.SliceStable(r.Resources, func(i, j int) bool { return r.Resources[i].Order < r.Resources[j].Order })
	return r
}
