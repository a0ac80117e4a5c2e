// Package version holds the manager's version and source revision. Release builds set
// them with the linker (make image, the Dockerfile):
//
//	-ldflags "-X github.com/kaddons/kaddons/internal/version.Version=v0.1.0
//	          -X github.com/kaddons/kaddons/internal/version.Revision=<commit>"
package version

// Version is the release, such as v0.1.0; "dev" for a build that did not set it.
var Version = "dev"

// Revision is the source commit the binary was built from; "unknown" when not set.
var Revision = "unknown"
