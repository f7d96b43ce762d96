// argocd-health evaluates Argo CD resource health checks with Argo CD's own code:
// github.com/argoproj/argo-cd/v3/util/lua (the Lua VM, its libraries and 1 s limit)
// behind gitops-engine's health.GetResourceHealth, the call the application
// controller makes for every live resource.
//
//	argocd-health --dir DIR    stdin: JSON array of objects; stdout: JSON array of
//	                           {"kind","name","status","message"[,"error"]}, the script
//	                           of each object taken from DIR/<group>/<Kind>/health.lua
//	argocd-health test DIR     every DIR/**/health_test.yaml, like upstream's
//	                           TestLuaHealthScript; exit 1 listing every mismatch
//	argocd-health sync ... DIR one Argo CD sync of the manifests under DIR against the
//	                           cluster of $KUBECONFIG with gitops-engine's sync code and
//	                           argocd-cm's health checks (sync.go)
//
// The scripts are installed the way an argocd-cm override is
// (resource.customizations.health.<group>_<Kind>), that is without
// resource.customizations.useOpenLibs: no string, math, io, ...
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

type result struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: argocd-health --dir DIR < objects.json | argocd-health test DIR | argocd-health sync ... DIR")
	os.Exit(2)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "sync" {
		os.Exit(syncCommand(os.Args[2:], os.Stdout))
	}
	if len(os.Args) != 3 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "--dir":
		err = evaluate(os.Args[2], os.Stdin, os.Stdout)
	case "test":
		err = test(os.Args[2])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "argocd-health:", err)
		os.Exit(1)
	}
}

// overrides reads DIR/<group>/<Kind>/health.lua into the map argocd-cm's
// resource.customizations.health.<group>_<Kind> keys produce (key "<group>/<Kind>",
// UseOpenLibs false unless resource.customizations.useOpenLibs is set, which it is not).
func overrides(dir string) (lua.ResourceHealthOverrides, error) {
	out := lua.ResourceHealthOverrides{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != "health.lua" {
			return nil
		}
		rel, err := filepath.Rel(dir, filepath.Dir(path))
		if err != nil {
			return err
		}
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if len(parts) != 2 {
			return fmt.Errorf("%s: expected DIR/<group>/<Kind>/health.lua", path)
		}
		script, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[parts[0]+"/"+parts[1]] = appv1.ResourceOverride{HealthLua: string(script), UseOpenLibs: false}
		return nil
	})
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("no <group>/<Kind>/health.lua under %s", dir)
	}
	return out, err
}

func assess(o lua.ResourceHealthOverrides, u *unstructured.Unstructured) result {
	r := result{Kind: u.GetKind(), Name: u.GetName()}
	hs, err := health.GetResourceHealth(u, o)
	if hs != nil {
		r.Status, r.Message = string(hs.Status), hs.Message
	}
	if err != nil {
		r.Error = err.Error()
	}
	if hs == nil && err == nil {
		r.Error = "no health check applies to " + lua.GetConfigMapKey(u.GroupVersionKind())
	}
	return r
}

func decode(data []byte) (*unstructured.Unstructured, error) {
	raw, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, u.UnmarshalJSON(raw)
}

func evaluate(dir string, in io.Reader, out io.Writer) error {
	o, err := overrides(dir)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	var objs []json.RawMessage
	if err := json.Unmarshal(data, &objs); err != nil {
		return fmt.Errorf("stdin is not a JSON array: %w", err)
	}
	results := make([]result, 0, len(objs))
	for _, raw := range objs {
		u, err := decode(raw)
		if err != nil {
			results = append(results, result{Status: "Unknown", Error: err.Error()})
			continue
		}
		results = append(results, assess(o, u))
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

type healthTest struct {
	Tests []struct {
		InputPath    string `json:"inputPath"`
		HealthStatus struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"healthStatus"`
	} `json:"tests"`
}

func test(dir string) error {
	o, err := overrides(dir)
	if err != nil {
		return err
	}
	var failures []string
	count := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if _, err := os.Stat(filepath.Join(path, "health.lua")); err == nil {
				if _, err := os.Stat(filepath.Join(path, "health_test.yaml")); err != nil {
					failures = append(failures, path+": health.lua without health_test.yaml")
				}
			}
			return nil
		}
		if d.Name() != "health_test.yaml" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var ht healthTest
		if err := yaml.UnmarshalStrict(data, &ht); err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", path, err))
			return nil
		}
		if len(ht.Tests) == 0 {
			failures = append(failures, path+": no tests")
		}
		for _, t := range ht.Tests {
			count++
			input := filepath.Join(filepath.Dir(path), t.InputPath)
			data, err := os.ReadFile(input)
			if err != nil {
				failures = append(failures, fmt.Sprintf("%s: %v", input, err))
				continue
			}
			u, err := decode(data)
			if err != nil {
				failures = append(failures, fmt.Sprintf("%s: %v", input, err))
				continue
			}
			got := assess(o, u)
			if got.Error != "" || got.Status != t.HealthStatus.Status || got.Message != t.HealthStatus.Message {
				failures = append(failures, fmt.Sprintf("%s: want %s %q, got %s %q%s", input,
					t.HealthStatus.Status, t.HealthStatus.Message, got.Status, got.Message, errSuffix(got.Error)))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range failures {
		fmt.Println("FAIL", f)
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d of %d health tests failed", len(failures), count)
	}
	fmt.Printf("ok: %d health tests under %s\n", count, dir)
	return nil
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " (error: " + e + ")"
}
