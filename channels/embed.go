// Package channels holds the channel files and packages that ship with kaddons, and
// embeds them into the manager binary: the configuration's Builtin channel source reads
// FS, so the image needs no channels folder on disk.
//
// A new channel file must be added to the go:embed line below; TestEmbedded fails until
// it is.
package channels

import "embed"

// FS holds the channel files (stable, rapid) and packages/ at its root, the layout
// internal/channels reads.
//
//go:embed stable rapid packages
var FS embed.FS
