package helm_test

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v4/pkg/chart/common"

	"github.com/kaddons/kaddons/internal/channels/helm"
	"github.com/kaddons/kaddons/internal/channels/helm/charttest"
)

// metricsServerRequest is a render of metrics-server's chart, as Helm would install it
// into kube-system, and the chart's folder on disk.
func metricsServerRequest(t *testing.T) (helm.Request, string) {
	dir, chart := charttest.MetricsServer(t)
	return helm.Request{
		Chart: os.DirFS(dir), Dir: charttest.MetricsServerChart, Key: "metrics-server/" + charttest.MetricsServerChartVersion,
		ReleaseName: "metrics-server", Namespace: "kube-system", KubeVersion: "v1.37.2",
	}, chart
}

// metricsServerOverride are values that reach most of the chart's templates: two
// replicas with a PodDisruptionBudget, cert-manager's Issuer and Certificate, the addon
// resizer (nanny) and its RBAC, a ServiceMonitor.
const metricsServerOverride = `
replicas: 2
podDisruptionBudget:
  enabled: true
  minAvailable: 1
args:
  - --kubelet-insecure-tls
apiService:
  insecureSkipTLSVerify: false
tls:
  type: cert-manager
addonResizer:
  enabled: true
metrics:
  enabled: true
serviceMonitor:
  enabled: true
resources:
  requests:
    cpu: 50m
    memory: 64Mi
`

// valuesOf decodes YAML values as `helm template -f` reads them.
func valuesOf(t *testing.T, text string) map[string]any {
	t.Helper()
	if text == "" {
		return nil
	}
	v, err := common.ReadValues([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

func TestRenderMetricsServerChart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		want   []string
	}{{
		name: "defaults",
		want: []string{
			"ServiceAccount metrics-server", "ClusterRole system:metrics-server-aggregated-reader",
			"ClusterRole system:metrics-server", "ClusterRoleBinding metrics-server:system:auth-delegator",
			"ClusterRoleBinding system:metrics-server", "RoleBinding metrics-server-auth-reader", "Service metrics-server",
			"Deployment metrics-server", "APIService v1beta1.metrics.k8s.io",
		},
	}, {
		name: "values over the defaults", values: metricsServerOverride,
		want: []string{
			"PodDisruptionBudget metrics-server", "ServiceAccount metrics-server", "ConfigMap metrics-server-nanny-config",
			"ClusterRole system:metrics-server-aggregated-reader", "ClusterRole system:metrics-server-nanny",
			"ClusterRole system:metrics-server", "ClusterRoleBinding metrics-server:system:auth-delegator",
			"ClusterRoleBinding system:metrics-server-nanny", "ClusterRoleBinding system:metrics-server",
			"Role system:metrics-server-nanny", "RoleBinding metrics-server-nanny", "RoleBinding metrics-server-auth-reader",
			"Service metrics-server", "Deployment metrics-server", "APIService v1beta1.metrics.k8s.io",
			"Certificate metrics-server", "Issuer metrics-server-issuer", "ServiceMonitor metrics-server",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := metricsServerRequest(t)
			req.Values = valuesOf(t, tc.values)
			res, err := helm.Render(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.CRDs) != 0 {
				t.Errorf("CRDs %v, want none", keys(res.CRDs))
			}
			if diff := cmp.Diff(tc.want, keys(res.Objects)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			if res.Nondeterministic != nil {
				t.Errorf("nondeterministic functions %v", res.Nondeterministic)
			}
			for _, u := range res.Objects {
				for k := range u.GetAnnotations() {
					if strings.Contains(k, "helm.sh/") || strings.HasPrefix(k, "addons.kaddons.dev/") {
						t.Errorf("%s has the annotation %s", objectKey(u), k)
					}
				}
			}
		})
	}
}
