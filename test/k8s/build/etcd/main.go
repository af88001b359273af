// etcd built from its Go module (go.etcd.io/etcd/server/v3): the same entry point as the
// upstream etcd binary, so the k8s tier runs a real etcd without a download.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
