package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/kaddons/kaddons/hack/internal/ociimage"
)

// goBuild compiles programs of one module version in a throwaway module under the cache:
// its only requirement is that module, so the build list is the module's own (none of
// the modules built here has replace directives).
func (b *builder) goBuild(programs []goProgram) ([]ociimage.File, error) {
	m, v := programs[0].module, programs[0].version
	dir := filepath.Join(b.cache, "build", strings.ReplaceAll(m, "/", "_")+"@"+v)
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module kaddons.invalid/addonimages/build\n\ngo 1.21\n"), 0o644); err != nil {
		return nil, err
	}
	env := []string{"CGO_ENABLED=0", "GOOS=" + platform.OS, "GOARCH=" + platform.Architecture, "GOWORK=off", "GOFLAGS=-mod=mod"}
	get := []string{"get"}
	for _, p := range programs {
		get = append(get, p.pkg+"@"+v)
	}
	b.logf("go %s (in %s)", strings.Join(get, " "), dir)
	if _, err := runCommand(dir, env, "go", get...); err != nil {
		return nil, err
	}
	var out []ociimage.File
	for _, p := range programs {
		bin := filepath.Join(dir, "bin", filepath.Base(p.dest))
		start := time.Now()
		if _, err := runCommand(dir, env, "go", "build", "-trimpath", "-ldflags", p.ldflags, "-o", bin, p.pkg); err != nil {
			return nil, err
		}
		b.logf("compiled %s@%s in %s", p.pkg, v, time.Since(start).Round(time.Second))
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		out = append(out, ociimage.File{Name: p.dest, Mode: 0o755, Data: data})
	}
	return out, nil
}

// moduleDir is where the module cache holds module@version (downloading it if needed).
func (b *builder) moduleDir(module, version string) (string, error) {
	out, err := runCommand(b.root, nil, "go", "mod", "download", "-json", module+"@"+version)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`"Dir": "([^"]+)"`).FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("go mod download %s@%s: no folder", module, version)
	}
	return m[1], nil
}

// kubeModuleDir is the module folder of the Kubernetes that hack/tools/kube pins.
func (b *builder) kubeModuleDir() (string, error) {
	v, err := b.kubeVersion()
	if err != nil {
		return "", err
	}
	return b.moduleDir("k8s.io/kubernetes", v)
}

// kubeVersion is the Kubernetes version hack/tools/kube pins (what hack/toolchain.sh builds).
func (b *builder) kubeVersion() (string, error) {
	out, err := runCommand(filepath.Join(b.root, "hack/tools/kube"), nil, "go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	return strings.TrimSpace(out), err
}

// pauseVersion is the pause image tag of the pinned Kubernetes (build/pause/Makefile;
// kubeadm's constants.PauseVersion names the same).
func (b *builder) pauseVersion() (string, error) {
	dir, err := b.kubeModuleDir()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(dir, "build/pause/Makefile"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^TAG \?= *(\S+)`).FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("no TAG in %s/build/pause/Makefile", dir)
	}
	return string(m[1]), nil
}
