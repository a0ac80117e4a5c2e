package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kaddons/kaddons/hack/internal/ociimage"
)

// goProgram is a program compiled from the Go module proxy: package pkg of module@version,
// static (CGO_ENABLED=0), -trimpath, installed at dest in the image.
type goProgram struct {
	module, version, pkg string
	dest                 string
	ldflags              string
}

// recipe is how one add-on image is made.
type recipe struct {
	name    string // what the command line selects: coredns, metrics-server, ...
	version string // the image tag
	ref     string // exactly the reference the package's manifest names
	note    string // what differs from upstream's image, for the docs and the labels
	// base is the distroless-like base layer: users, groups, CA certificates, /tmp.
	base bool
	// debs are Debian packages (this machine's release) unpacked into the root file system,
	// for programs that the add-on runs (iptables, conntrack, ...).
	debs []string
	// links are extra symbolic links in the root file system (Debian's alternatives, which
	// a package's maintainer script would make).
	links map[string]string
	// busybox links every applet of Debian's busybox-static that no package provides.
	busybox    bool
	goPrograms []goProgram
	// local builds programs that are not Go modules of the proxy (pause.c, the kube-proxy
	// of hack/toolchain.sh) and returns them as files.
	local func(b *builder) ([]ociimage.File, error)
	// files are small files of the image, such as a script out of a module's source.
	files func(b *builder) ([]ociimage.File, error)
	// capabilities are file capabilities (security.capability) by path.
	capabilities map[string]string
	user         string
	entrypoint   []string
	workdir      string
}

// Paths of the images.
const (
	corednsPath = "/coredns"
	rootHome    = "/root"
)

// capNetBindService is the security.capability value of `setcap cap_net_bind_service=+ep`:
// VFS_CAP_REVISION_2 with the effective flag, then CAP_NET_BIND_SERVICE (bit 10) permitted.
const capNetBindService = "\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// Debian packages of a node's packet filtering: iptables (both its nft and legacy
// back-ends; the nft one is Debian's default, as on this machine) and conntrack.
var netfilterDebs = []string{
	"libc6", "libgcc-s1", "netbase",
	"iptables", "libip4tc2", "libip6tc2", "libxtables12", "libmnl0", "libnftnl11",
	"libnetfilter-conntrack3", "libnfnetlink0", "conntrack",
}

// iptablesNft are Debian's default alternatives for iptables (update-alternatives in the
// package's postinst, which does not run here).
var iptablesNft = func() map[string]string {
	m := map[string]string{}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			m["/usr/sbin/"+fam+suffix] = fam + "-nft" + suffix
		}
	}
	return m
}()

func coredns(version string) recipe {
	return recipe{
		name: "coredns", version: version, ref: "registry.k8s.io/coredns/coredns:" + version,
		note: "as upstream's Dockerfile: /coredns with cap_net_bind_service=+ep on a distroless-like base, user nonroot (65532)",
		base: true,
		goPrograms: []goProgram{{module: "github.com/coredns/coredns", version: version,
			pkg: "github.com/coredns/coredns", dest: corednsPath,
			ldflags: "-s -w -X github.com/coredns/coredns/coremain.GitCommit=" + version}},
		capabilities: map[string]string{corednsPath: capNetBindService},
		user:         "65532:65532", entrypoint: []string{corednsPath}, workdir: "/",
	}
}

func metricsServer(version string) recipe {
	return recipe{
		name: "metrics-server", version: version, ref: "registry.k8s.io/metrics-server/metrics-server:" + version,
		note: "as upstream's Dockerfile: /metrics-server on a distroless-like base, user 65534",
		base: true,
		goPrograms: []goProgram{{module: "sigs.k8s.io/metrics-server", version: version,
			pkg: "sigs.k8s.io/metrics-server/cmd/metrics-server", dest: "/metrics-server",
			ldflags: "-w -X k8s.io/client-go/pkg/version.gitVersion=" + version +
				" -X k8s.io/client-go/pkg/version.buildDate=1970-01-01T00:00:00Z"}},
		user: "65534", entrypoint: []string{"/metrics-server"}, workdir: "/",
	}
}

// kubeProxy is the kube-proxy that hack/toolchain.sh builds (the Kubernetes version of
// hack/tools/kube), with Debian's iptables and conntrack where upstream's distroless-iptables
// base has them.
func kubeProxy(version string) recipe {
	return recipe{
		name: "kube-proxy", version: version, ref: "registry.k8s.io/kube-proxy:" + version,
		note: "/usr/local/bin/kube-proxy from hack/toolchain.sh; iptables (nft back-end, Debian's default; " +
			"upstream's iptables-wrapper is not included) and conntrack from Debian packages",
		debs: netfilterDebs, links: iptablesNft,
		local: func(b *builder) ([]ociimage.File, error) {
			out, err := b.run(b.root, filepath.Join(b.root, "hack/toolchain.sh"), "dir")
			if err != nil {
				return nil, err
			}
			bin := filepath.Join(strings.TrimSpace(out), "kube-proxy")
			if _, err := os.Stat(bin); err != nil {
				b.logf("building kube-proxy with hack/toolchain.sh")
				if _, err := b.run(b.root, filepath.Join(b.root, "hack/toolchain.sh"), "build", "kube-proxy"); err != nil {
					return nil, err
				}
			}
			data, err := os.ReadFile(bin)
			if err != nil {
				return nil, err
			}
			return []ociimage.File{{Name: "/usr/local/bin/kube-proxy", Mode: 0o755, Data: data}}, nil
		},
		user: "0:0",
	}
}

// kubeRouter is kube-router's image: the daemon, the CNI plugins it installs on the host
// (bridge, host-local, portmap, loopback, in /usr/libexec/cni as upstream's image has them,
// and its cni-install script), with iptables, ipset, conntrack, iproute2 and bash from
// Debian where upstream's Alpine base has them, and busybox for the shell tools.
func kubeRouter(version, cniVersion string) recipe {
	const mod = "github.com/cloudnativelabs/kube-router/v2"
	const cni = "github.com/containernetworking/plugins"
	progs := make([]goProgram, 0, 5)
	progs = append(progs, goProgram{module: mod, version: version, pkg: mod + "/cmd/kube-router", dest: "/usr/local/bin/kube-router",
		ldflags: "-s -w -X " + mod + "/pkg/version.Version=" + version + " -X " + mod + "/pkg/version.BuildDate=1970-01-01T00:00:00Z"})
	for _, p := range []string{"main/bridge", "ipam/host-local", "meta/portmap", "main/loopback"} {
		progs = append(progs, goProgram{module: cni, version: cniVersion, pkg: cni + "/plugins/" + p,
			dest:    "/usr/libexec/cni/" + filepath.Base(p),
			ldflags: "-s -w -X " + cni + "/pkg/utils/buildversion.BuildVersion=" + cniVersion})
	}
	debs := append(append([]string{}, netfilterDebs...),
		"ipset", "libipset13", "bash", "libtinfo6", "busybox-static",
		// cni-install runs install(1), which Debian's busybox lacks.
		"coreutils", "libacl1", "libattr1", "libgmp10",
		"iproute2", "libbpf1", "libelf1", "zlib1g", "libbsd0", "libmd0", "libcap2", "libdb5.3",
		"libselinux1", "libpcre2-8-0", "libtirpc3", "libgssapi-krb5-2", "libkrb5-3", "libk5crypto3",
		"libcom-err2", "libkrb5support0", "libkeyutils1", "libssl3")
	return recipe{
		name: "kube-router", version: version, ref: "docker.io/cloudnativelabs/kube-router:" + version,
		note: "kube-router and the CNI plugins " + cniVersion + " (the version kube-router's Makefile downloads) in /usr/libexec/cni, as upstream's; " +
			"iptables (nft back-end), ipset, conntrack, iproute2, bash, coreutils and busybox from Debian packages instead of Alpine's; " +
			"no gobgp CLI, ipvsadm or curl",
		debs: debs, links: iptablesNft, busybox: true, goPrograms: progs,
		files: func(b *builder) ([]ociimage.File, error) {
			dir, err := b.moduleDir(mod, version)
			if err != nil {
				return nil, err
			}
			script, err := os.ReadFile(filepath.Join(dir, "build/image-assets/cni-install"))
			if err != nil {
				return nil, err
			}
			return []ociimage.File{
				{Name: "/usr/local/bin/cni-install", Mode: 0o755, Data: script},
				{Name: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
				{Name: "/var/lib/gobgp", Mode: 0o755, Dir: true},
				{Name: rootHome, Mode: 0o700, Dir: true},
				{Name: "/tmp", Mode: 0o1777, Dir: true},
			}, nil
		},
		user: "0:0", entrypoint: []string{"/usr/local/bin/kube-router"}, workdir: rootHome,
	}
}

// pause is the sandbox image: Kubernetes' build/pause/linux/pause.c, compiled statically
// as build/pause/Makefile does, user 65535, entrypoint /pause.
func pause(version string) recipe {
	return recipe{
		name: "pause", version: version, ref: "registry.k8s.io/pause:" + version,
		note: "as upstream's build/pause/Dockerfile: a static /pause (gcc -Os -static, stripped) on an empty base",
		local: func(b *builder) ([]ociimage.File, error) {
			dir, err := b.kubeModuleDir()
			if err != nil {
				return nil, err
			}
			out := filepath.Join(b.cache, "build", "pause-"+version)
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return nil, err
			}
			if _, err := b.run(b.root, "gcc", "-Os", "-Wall", "-Werror", "-static", fmt.Sprintf("-DVERSION=v%s-kaddons", version),
				"-o", out, filepath.Join(dir, "build/pause/linux/pause.c")); err != nil {
				return nil, err
			}
			if _, err := b.run(b.root, "strip", out); err != nil {
				return nil, err
			}
			data, err := os.ReadFile(out)
			if err != nil {
				return nil, err
			}
			return []ociimage.File{{Name: "/pause", Mode: 0o755, Data: data}}, nil
		},
		user: "65535:65535", entrypoint: []string{"/pause"}, workdir: "/",
	}
}

// recipes are every add-on image, for the versions the packages under channels/packages
// name (and the pause image and kube-proxy of the pinned Kubernetes).
func recipes(b *builder) ([]recipe, error) {
	kube, err := b.kubeVersion()
	if err != nil {
		return nil, err
	}
	pauseVersion, err := b.pauseVersion()
	if err != nil {
		return nil, err
	}
	return append([]recipe{pause(pauseVersion), kubeProxy(kube)}, packageRecipes()...), nil
}

// packageRecipes are the images of the add-on packages: every version under
// channels/packages (a test checks), and the CNI.
func packageRecipes() []recipe {
	return []recipe{
		coredns("v1.11.3"), coredns("v1.12.1"), coredns("v1.14.6"),
		metricsServer("v0.7.2"), metricsServer("v0.8.0"),
		kubeRouter("v2.1.0", "v1.4.0"),
	}
}

// runCommand runs name with args in dir and returns its standard output; its standard
// error goes to ours.
func runCommand(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return string(out), nil
}
