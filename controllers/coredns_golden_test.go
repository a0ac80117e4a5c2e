package controllers

import (
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	addonv1alpha1 "sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/apis/v1alpha1"

	addonsv1alpha1 "github.com/kaddons/kaddons/api/v1alpha1"
	"github.com/kaddons/kaddons/internal/channels"
)

func TestCoreDNSGolden(t *testing.T) {
	// Only the shipped packages, not the test-only ones in testdata/packages.
	shipped := channels.NewCatalog(filepath.Join("..", "channels"), "")
	for _, version := range shipped.Versions("coredns") {
		for _, tc := range []struct {
			name      string
			namespace string
			spec      addonsv1alpha1.CoreDNSSpec
		}{
			{name: "defaults", namespace: "kube-system"},
			{
				name:      "custom",
				namespace: "kube-system",
				spec: addonsv1alpha1.CoreDNSSpec{
					DNSDomain:    "corp.example.org",
					ClusterIP:    "10.96.0.53",
					Replicas:     ptr.To[int32](3),
					NodeSelector: map[string]string{"node-role.kubernetes.io/control-plane": ""},
					PatchSpec: addonv1alpha1.PatchSpec{Patches: []*runtime.RawExtension{{Raw: []byte(
						`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},` +
							`"spec":{"template":{"spec":{"containers":[{"name":"coredns","resources":{"limits":{"memory":"256Mi"}}}]}}}}`)}}},
				},
			},
			{name: "tenant-namespace", namespace: "team-a"},
		} {
			t.Run(version+"/"+tc.name, func(t *testing.T) {
				cr := &addonsv1alpha1.CoreDNS{
					ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: tc.namespace},
					Spec:       tc.spec,
				}
				cr.Spec.Version = version
				expectGolden(t, CoreDNSDefinition(), cr, "coredns-"+version+"-"+tc.name)
			})
		}
	}
}
