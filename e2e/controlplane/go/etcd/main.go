// Command etcd is etcd's server built from the Go module proxy: etcd's own
// go.mod replaces its sibling modules with local paths, so "go install" of it
// at a version fails; this wrapper requires the published modules instead.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
