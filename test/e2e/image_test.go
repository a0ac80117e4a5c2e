//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
)

// imagePlatforms are the platforms the test has `make image` build: the machine's own
// only. A second architecture is a cross-compilation of the whole manager, minutes on a
// cold CI machine, and proves nothing the first does not: hack/image's tests assemble
// the two-platform index make image writes by default (linux/amd64 and linux/arm64).
var imagePlatforms = []string{"linux/amd64"}

// imageFile is one regular file of an image's flattened file system.
type imageFile struct {
	header *tar.Header
	data   []byte
}

// imageFiles flattens img and returns its regular files by absolute path, reading the
// contents of those in want.
func imageFiles(t *testing.T, img v1.Image, want ...string) map[string]imageFile {
	t.Helper()
	read := map[string]bool{}
	for _, w := range want {
		read[w] = true
	}
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	files := map[string]imageFile{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("reading the image's layers: %v", err)
		}
		path := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		f := imageFile{header: h}
		if read[path] {
			if f.data, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		files[path] = f
	}
}

// TestImage builds the manager image as `make image IMG=...` does, pushes it to a
// registry on 127.0.0.1, pulls it back and checks its platform's image, then runs the image's
// amd64 manager against the cluster as the installer's ServiceAccount, in an empty folder
// with no channels on disk: the samples become Ready (MetricsServer as far as this
// cluster allows).
func TestImage(t *testing.T) {
	g := NewWithT(t)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	imageRef := host + "/kaddons/manager:e2e"
	version := fmt.Sprintf("v0.0.0-e2e.%04x", rand.IntN(1<<16))
	revision := "e2e0000000000000000000000000000000000000"

	start := time.Now()
	cmd := exec.Command("make", "image", "IMG="+imageRef, "VERSION="+version, "REVISION="+revision,
		"IMAGE_PLATFORMS="+strings.Join(imagePlatforms, ","))
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "make image:\n%s", out)
	logf("make image built and pushed %s in %s", imageRef, time.Since(start).Round(time.Second))

	ref, err := name.ParseReference(imageRef)
	g.Expect(err).NotTo(HaveOccurred())
	index, err := remote.Index(ref)
	g.Expect(err).NotTo(HaveOccurred(), "pulling the index back")
	manifest, err := index.IndexManifest()
	g.Expect(err).NotTo(HaveOccurred())
	platforms := make([]string, 0, len(manifest.Manifests))
	for _, d := range manifest.Manifests {
		g.Expect(d.Platform).NotTo(BeNil(), "manifest %s has no platform", d.Digest)
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
	}
	sort.Strings(platforms)
	g.Expect(platforms).To(Equal(imagePlatforms))

	machineCAs, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	g.Expect(err).NotTo(HaveOccurred())
	var hostBinary []byte
	for _, d := range manifest.Manifests {
		arch := d.Platform.Architecture
		t.Run(d.Platform.OS+"/"+arch, func(t *testing.T) {
			g := NewWithT(t)
			img, err := remote.Image(ref.Context().Digest(d.Digest.String()))
			g.Expect(err).NotTo(HaveOccurred(), "pulling the %s image", arch)
			cfg, err := img.ConfigFile()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg.OS).To(Equal("linux"))
			g.Expect(cfg.Architecture).To(Equal(arch))
			g.Expect(cfg.Config.User).To(Equal("65532:65532"))
			g.Expect(cfg.Config.Entrypoint).To(Equal([]string{"/manager"}))
			g.Expect(cfg.Config.Labels).To(HaveKeyWithValue("org.opencontainers.image.version", version))
			g.Expect(cfg.Config.Labels).To(HaveKeyWithValue("org.opencontainers.image.revision", revision))
			g.Expect(cfg.Config.Labels).To(HaveKeyWithValue("org.opencontainers.image.source", "https://github.com/kaddons/kaddons"))

			const sbom = "/usr/share/sbom/manager.spdx.json"
			files := imageFiles(t, img, "/manager", "/etc/passwd", "/etc/ssl/certs/ca-certificates.crt", sbom)
			manager, ok := files["/manager"]
			g.Expect(ok).To(BeTrue(), "no /manager in the image")
			g.Expect(manager.header.Mode&0o111).NotTo(BeZero(), "/manager is not executable")
			g.Expect(files["/etc/passwd"].data).To(ContainSubstring(":65532:65532:"))
			g.Expect(files["/etc/ssl/certs/ca-certificates.crt"].data).To(Equal(machineCAs))
			for path := range files {
				g.Expect(path).NotTo(HavePrefix("/channels"), "the channels are embedded; the image needs no channels folder")
			}

			// The binary is a static executable for the platform, built as make image says.
			bin, err := elf.NewFile(bytes.NewReader(manager.data))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(bin.Machine).To(Equal(map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]))
			for _, p := range bin.Progs {
				g.Expect(p.Type).NotTo(Equal(elf.PT_INTERP), "/manager is dynamically linked")
			}
			info, err := buildinfo.Read(bytes.NewReader(manager.data))
			g.Expect(err).NotTo(HaveOccurred())
			settings := map[string]string{}
			for _, s := range info.Settings {
				settings[s.Key] = s.Value
			}
			g.Expect(settings).To(HaveKeyWithValue("CGO_ENABLED", "0"))
			g.Expect(settings).To(HaveKeyWithValue("GOARCH", arch))
			g.Expect(settings).To(HaveKeyWithValue("-tags", "without_exec_applier,without_direct_applier"))

			var doc struct {
				SPDXVersion string `json:"spdxVersion"`
				Packages    []struct {
					Name    string `json:"name"`
					Version string `json:"versionInfo"`
				} `json:"packages"`
			}
			g.Expect(json.Unmarshal(files[sbom].data, &doc)).To(Succeed(), "the SBOM is not JSON")
			g.Expect(doc.SPDXVersion).To(Equal("SPDX-2.3"))
			deps := make([]string, 0, len(doc.Packages))
			for _, p := range doc.Packages {
				deps = append(deps, p.Name+"@"+p.Version)
			}
			for _, dep := range info.Deps {
				if dep.Path == "sigs.k8s.io/controller-runtime" {
					g.Expect(deps).To(ContainElement(dep.Path+"@"+dep.Version), "the SBOM lacks a module of the binary")
				}
			}
			if arch == runtime.GOARCH {
				hostBinary = manager.data
			}
		})
	}
	g.Expect(hostBinary).NotTo(BeEmpty(), "the image has no %s manager to run here", runtime.GOARCH)
	runImageManager(t, hostBinary, imageRef, version)
}

// runImageManager runs the manager binary taken from the image with the installer's
// RBAC, in an empty folder, and checks the samples come up.
func runImageManager(t *testing.T, binary []byte, imageRef, version string) {
	g := NewWithT(t)
	dir := filepath.Join(workDir, "image")
	g.Expect(os.MkdirAll(filepath.Join(dir, "run"), 0o755)).To(Succeed())
	path := filepath.Join(dir, "manager")
	g.Expect(os.WriteFile(path, binary, 0o755)).To(Succeed())

	// The installer's ServiceAccount and RBAC, from the installer itself.
	installer := filepath.Join(dir, "install.yaml")
	cmd := exec.Command("make", "build-installer", "IMG="+imageRef, "INSTALLER="+installer)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "make build-installer:\n%s", out)
	rbac, err := installerDocs(installer, "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = kubectlIn(rbac, "apply", "--server-side", "--force-conflicts", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig := filepath.Join(dir, "manager.kubeconfig")
	g.Expect(runLocalCluster(os.Stderr, "kubeconfig-for-sa", operatorNamespace, operatorServiceAccount, kubeconfig)).To(Succeed())

	// One manager at a time: the suite's runs without leader election.
	stopAllManagers()
	p := newManager("image-manager")
	p.binary, p.dir, p.kubeconfig, p.builtinChannels = path, filepath.Join(dir, "run"), kubeconfig, true
	t.Cleanup(func() {
		p.stop()
		if err := suiteManager.ensureRunning(); err != nil {
			t.Errorf("restarting the suite's manager: %v", err)
		}
	})
	samples := filepath.Join(repoRoot, "config", "samples")
	t.Cleanup(func() {
		// With the image's manager still running, so that finalizers release the
		// cluster-scoped children.
		if _, err := kubectl("delete", "-k", samples, "--ignore-not-found", "--timeout="+deleteTimeout.String()); err != nil {
			t.Errorf("deleting the samples: %v", err)
		}
	})
	dumpOnFailure(t)
	g.Expect(p.start()).To(Succeed())
	g.Expect(p.logHasLine("Starting manager", `"version":"`+version+`"`, `"channels":"builtin"`)).To(BeTrue(),
		"the manager does not report version %s and the built-in channels:\n%s", version, p.logTail(20))

	start := time.Now()
	_, err = kubectl("apply", "-k", samples)
	g.Expect(err).NotTo(HaveOccurred())
	const ns = "kube-system"
	for _, a := range []addonsv1alpha1.Addon{
		&addonsv1alpha1.CoreDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}},
		&addonsv1alpha1.NodeLocalDNS{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodelocaldns"}},
		&addonsv1alpha1.Dashboard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dashboard"}},
	} {
		waitAddon(t, a, isReady)
		g.Expect(a.GetAddonStatus().AppliedVersion).NotTo(BeEmpty())
	}
	ms := &addonsv1alpha1.MetricsServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metrics-server"}}
	ready := waitAddon(t, ms, func(g Gomega, ready metav1.Condition) {
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(addonsv1alpha1.ReasonChildrenNotReady))
		g.Expect(ready.Message).NotTo(ContainSubstring("Deployment"), "the Deployment is expected to be available")
	})
	// This cluster publishes no endpoints, so the metrics API is the one thing missing.
	g.Expect(ready.Message).To(Equal(fmt.Sprintf("APIService v1beta1.metrics.k8s.io: Available=False (EndpointsNotFound: "+
		"cannot find endpointslices for service/metrics-server in %q)", ns)))
	logf("the image's manager brought the samples up in %s", time.Since(start).Round(time.Second))
}

// installerDocs returns the objects of the installer file of the given kinds, as one
// YAML stream.
func installerDocs(path string, kinds ...string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	want := map[string]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	var docs []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		for _, line := range strings.Split(doc, "\n") {
			if kind, ok := strings.CutPrefix(line, "kind: "); ok {
				if want[strings.TrimSpace(kind)] {
					docs = append(docs, doc)
				}
				break
			}
		}
	}
	if len(docs) == 0 {
		return "", fmt.Errorf("%s holds none of %v", path, kinds)
	}
	return strings.Join(docs, "\n---\n"), nil
}
