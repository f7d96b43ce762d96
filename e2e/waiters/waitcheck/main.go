// waitcheck runs the deploy tools' own status checkers over Kubernetes objects:
//
//	waitcheck kstatus                          sigs.k8s.io/cli-utils kstatus status.Compute
//	waitcheck flux-kstatus                     github.com/fluxcd/cli-utils (Flux's fork) status.Compute
//	waitcheck flux-cel --kustomization FILE    kustomize-controller's readers: the CEL
//	                                           healthCheckExprs of FILE (fluxcd/pkg/runtime/cel),
//	                                           falling back to Flux's kstatus for other kinds
//
// It reads a JSON array of objects on stdin and prints a JSON array with one
// {"kind","name","status","message"[,"error"]} per object, in order. An error
// of the checker goes into "error"; the exit code is then still 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	fluxengine "github.com/fluxcd/cli-utils/pkg/kstatus/polling/engine"
	fluxstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	fluxcel "github.com/fluxcd/pkg/runtime/cel"
	"github.com/fluxcd/pkg/runtime/statusreaders"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type result struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

type checker func(ctx context.Context, u *unstructured.Unstructured) result

func usage() {
	fmt.Fprintln(os.Stderr, "usage: waitcheck kstatus | flux-kstatus | flux-cel --kustomization FILE  < objects.json")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var check checker
	switch os.Args[1] {
	case "kstatus":
		check = sigsKstatus
	case "flux-kstatus":
		check = fluxKstatus
	case "flux-cel":
		if len(os.Args) != 4 || os.Args[2] != "--kustomization" {
			usage()
		}
		c, err := fluxCel(os.Args[3])
		if err != nil {
			fmt.Fprintln(os.Stderr, "waitcheck:", err)
			os.Exit(1)
		}
		check = c
	default:
		usage()
	}
	if err := run(os.Stdin, os.Stdout, check); err != nil {
		fmt.Fprintln(os.Stderr, "waitcheck:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, check checker) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	// Decoded like the apimachinery's unstructured JSON decoder does, so integers stay
	// int64 (kstatus reads observedGeneration with NestedInt64).
	var objs []map[string]any
	if err := yaml.Unmarshal(data, &objs); err != nil {
		return fmt.Errorf("stdin is not a JSON array of objects: %w", err)
	}
	results := make([]result, 0, len(objs))
	for _, o := range objs {
		u := &unstructured.Unstructured{}
		if raw, err := json.Marshal(o); err != nil {
			return err
		} else if err := u.UnmarshalJSON(raw); err != nil {
			results = append(results, result{Status: "Unknown", Error: err.Error()})
			continue
		}
		results = append(results, check(context.Background(), u))
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

func base(u *unstructured.Unstructured) result {
	return result{Kind: u.GetKind(), Name: u.GetName()}
}

func sigsKstatus(_ context.Context, u *unstructured.Unstructured) result {
	r := base(u)
	res, err := kstatus.Compute(u)
	if err != nil {
		r.Status, r.Error = "Unknown", err.Error()
		return r
	}
	r.Status, r.Message = string(res.Status), res.Message
	return r
}

func fluxKstatus(_ context.Context, u *unstructured.Unstructured) result {
	r := base(u)
	res, err := fluxstatus.Compute(u)
	if err != nil {
		r.Status, r.Error = "Unknown", err.Error()
		return r
	}
	r.Status, r.Message = string(res.Status), res.Message
	return r
}

// fluxCel builds the status readers kustomize-controller's poller consults
// (internal/controller/kustomization_controller.go getClientAndPoller): first the
// custom Job reader, then the CEL reader of spec.healthCheckExprs; every other kind
// falls through to the generic reader, Flux's status.Compute.
func fluxCel(path string) (checker, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var k kustomizev1.Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if k.Kind != kustomizev1.KustomizationKind {
		return nil, fmt.Errorf("%s: kind is %q, not %s", path, k.Kind, kustomizev1.KustomizationKind)
	}
	if len(k.Spec.HealthCheckExprs) == 0 {
		return nil, errors.New(path + ": spec.healthCheckExprs is empty")
	}
	ctor, err := fluxcel.NewStatusReader(k.Spec.HealthCheckExprs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	readers := []fluxengine.StatusReader{statusreaders.NewCustomJobStatusReader(nil), ctor(nil)}
	return func(ctx context.Context, u *unstructured.Unstructured) result {
		gk := schema.FromAPIVersionAndKind(u.GetAPIVersion(), u.GetKind()).GroupKind()
		for _, reader := range readers {
			if !reader.Supports(gk) {
				continue
			}
			r := base(u)
			rs, err := reader.ReadStatusForObject(ctx, nil, u)
			if err != nil {
				r.Status, r.Error = "Unknown", err.Error()
				return r
			}
			r.Status, r.Message = rs.Status.String(), rs.Message
			if rs.Error != nil {
				r.Error = rs.Error.Error()
			}
			return r
		}
		return fluxKstatus(ctx, u)
	}, nil
}
