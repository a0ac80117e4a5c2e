// Command kopschannel sets every manifestHash in a kops Addons channel file to the hash
// kops computes for the manifest the entry names: the hex SHA-256 of the manifest with its
// leading and trailing white space trimmed (k8s.io/kops,
// upup/pkg/fi/cloudup/bootstrapchannelbuilder and upup/pkg/fi/utils.HashString). Manifests
// are read relative to the channel file, as kops resolves them. `make kops-channel` runs it.
//
// Usage: go run ./hack/kopschannel examples/kops/addons.yaml
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kopschannel CHANNEL_FILE")
		os.Exit(2)
	}
	if err := rehash(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "kopschannel: %v\n", err)
		os.Exit(1)
	}
}

// rehash rewrites the manifestHash of every entry of the channel file, keeping its comments.
func rehash(channel string) error {
	doc, err := yaml.ReadFile(channel)
	if err != nil {
		return fmt.Errorf("reading %s: %w", channel, err)
	}
	addons, err := doc.Pipe(yaml.Lookup("spec", "addons"))
	if err != nil || addons == nil {
		return fmt.Errorf("%s has no spec.addons", channel)
	}
	entries, err := addons.Elements()
	if err != nil {
		return fmt.Errorf("%s: spec.addons: %w", channel, err)
	}
	for i, entry := range entries {
		node, err := entry.Pipe(yaml.Lookup("manifest"))
		if err != nil || node == nil {
			return fmt.Errorf("%s: spec.addons[%d] has no manifest", channel, i)
		}
		// Only files next to the channel: the channel travels as one folder, and the tool
		// reads nothing else.
		manifest := yaml.GetValue(node)
		if manifest == "" || manifest != filepath.Base(manifest) || manifest == ".." || strings.Contains(manifest, "://") {
			return fmt.Errorf("%s: spec.addons[%d]: manifest %q is not a file next to the channel file", channel, i, manifest)
		}
		hash, err := manifestHash(filepath.Join(filepath.Dir(channel), manifest))
		if err != nil {
			return err
		}
		if err := entry.PipeE(yaml.SetField("manifestHash", yaml.NewStringRNode(hash))); err != nil {
			return fmt.Errorf("%s: spec.addons[%d]: %w", channel, i, err)
		}
		fmt.Printf("%s %s\n", hash, manifest)
	}
	return yaml.WriteFile(doc, channel)
}

// manifestHash hashes a manifest the way kops does.
func manifestHash(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading manifest: %w", err)
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(data))))
	return hex.EncodeToString(sum[:]), nil
}
