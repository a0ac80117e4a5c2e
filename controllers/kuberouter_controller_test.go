package controllers

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/engine"
)

// TestKubeRouterTransforms renders the kube-router package with each typed field and
// checks the kube-router container's args and environment, and the host folders its
// CNI volumes name.
func TestKubeRouterTransforms(t *testing.T) {
	r, err := engine.New(testMgr, KubeRouterDefinition(), engineOptions())
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name string
		spec addonsv1alpha1.KubeRouterSpec
		// args must be among the container's args; env is the KUBERNETES_SERVICE_*
		// variables it must have (none: it has none).
		args []any
		env  map[string]string
		// hostPaths is the path of each CNI hostPath volume (nil: the package's).
		hostPaths map[string]string
	}{
		{name: "defaults: upstream's flags, the in-cluster address, the usual CNI folders",
			args:      []any{"--run-router=true", "--run-firewall=true", "--run-service-proxy=false", "--bgp-graceful-restart=true"},
			env:       map[string]string{},
			hostPaths: map[string]string{"cni-conf-dir": "/etc/cni/net.d", "cni-bin-dir": "/opt/cni/bin"}},
		{name: "cniConfDir and cniBinDir",
			spec:      addonsv1alpha1.KubeRouterSpec{CNIConfDir: "/var/lib/node/cni/net.d", CNIBinDir: "/var/lib/node/cni/bin"},
			hostPaths: map[string]string{"cni-conf-dir": "/var/lib/node/cni/net.d", "cni-bin-dir": "/var/lib/node/cni/bin"}},
		{name: "apiServerEndpoint",
			spec: addonsv1alpha1.KubeRouterSpec{APIServerEndpoint: "api.example.org:6443"},
			env:  map[string]string{"KUBERNETES_SERVICE_HOST": "api.example.org", "KUBERNETES_SERVICE_PORT": "6443"}},
		{name: "an IPv6 endpoint loses its brackets",
			spec: addonsv1alpha1.KubeRouterSpec{APIServerEndpoint: "[fd00::1]:443"},
			env:  map[string]string{"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}},
		{name: "networkPolicy false",
			spec: addonsv1alpha1.KubeRouterSpec{NetworkPolicy: ptr.To(false)},
			args: []any{"--run-router=true", "--run-firewall=false", "--run-service-proxy=false"}},
		{name: "networkPolicy true",
			spec: addonsv1alpha1.KubeRouterSpec{NetworkPolicy: ptr.To(true)},
			args: []any{"--run-firewall=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			// A name per case: the engine caches what it rendered for an add-on's generation.
			cr := &addonsv1alpha1.KubeRouter{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kube-router-%d", i), Namespace: "kube-system"}, Spec: tc.spec}
			objects, err := r.Render(context.Background(), cr)
			g.Expect(err).NotTo(HaveOccurred())
			ds := engine.FindObject(objects, "DaemonSet", "kube-router")
			g.Expect(ds).NotTo(BeNil())
			containers, _, _ := unstructured.NestedSlice(ds.UnstructuredObject().Object, "spec", "template", "spec", "containers")
			c := containers[0].(map[string]any)
			args, _ := c["args"].([]any)
			g.Expect(args).To(ContainElements(tc.args...))
			g.Expect(args).To(HaveLen(4), "a flag is set in place, never added twice")
			if tc.hostPaths != nil {
				volumes, _, _ := unstructured.NestedSlice(ds.UnstructuredObject().Object, "spec", "template", "spec", "volumes")
				got := map[string]string{}
				for _, v := range volumes {
					m := v.(map[string]any)
					if name := m["name"].(string); tc.hostPaths[name] != "" {
						got[name], _, _ = unstructured.NestedString(m, "hostPath", "path")
					}
				}
				g.Expect(got).To(Equal(tc.hostPaths))
			}
			if tc.env == nil {
				return
			}
			got := map[string]string{}
			for _, e := range c["env"].([]any) {
				m := e.(map[string]any)
				if name := m["name"].(string); name == "KUBERNETES_SERVICE_HOST" || name == "KUBERNETES_SERVICE_PORT" {
					got[name], _ = m["value"].(string)
				}
			}
			g.Expect(got).To(Equal(tc.env))
		})
	}
}

// TestKubeRouterValidation checks the markers of the typed fields against the API server.
func TestKubeRouterValidation(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for _, tc := range []struct {
		name, spec, message string
	}{
		{name: "endpoint without a port", spec: `{"apiServerEndpoint": "10.0.0.1"}`, message: "spec.apiServerEndpoint in body should match"},
		{name: "IPv6 endpoint without brackets", spec: `{"apiServerEndpoint": "fd00::1:6443"}`, message: "spec.apiServerEndpoint in body should match"},
		{name: "networkPolicy as a string", spec: `{"networkPolicy": "yes"}`, message: "spec.networkPolicy: Invalid value"},
		{name: "relative cniConfDir", spec: `{"cniConfDir": "etc/cni/net.d"}`, message: "spec.cniConfDir in body should match"},
		{name: "cniBinDir climbing out", spec: `{"cniBinDir": "/opt/cni/../../etc"}`, message: "must not contain . or .. segments"},
		{name: "cniConfDir with a trailing slash", spec: `{"cniConfDir": "/etc/cni/net.d/"}`, message: "spec.cniConfDir in body should match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := createInvalid(ctx, "KubeRouter", ns, tc.spec)
			g.Expect(err).To(HaveOccurred())
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.message))
		})
	}
}
