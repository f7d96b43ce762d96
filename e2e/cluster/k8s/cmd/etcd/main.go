// Command etcd is etcd's server entry point, built from the same module graph
// as the Kubernetes control plane in this module (see ../../go.mod).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
