//go:build tools

// Package pins keeps current releases of modules that KDP's go.mod pulls in at old,
// vulnerable versions (go-git v5.1.0, x/crypto, x/net). kaddons does not use KDP's git
// loader, but requiring these here keeps the whole module graph on patched releases, so
// `go list -m all` and scanners see no stale version.
package pins

import (
	_ "github.com/go-git/go-git/v5"
	_ "golang.org/x/crypto/ssh"
	_ "golang.org/x/net/html"
)
