package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
	"github.com/kaddons/kaddons/examples/extensions/internal/server"
)

// platform is the settings of most cases.
const platform = `
nodeSelector:
  platform.example.com/pool: system
  kubernetes.io/os: linux
tolerations:
- key: platform.example.com/dedicated
  operator: Exists
  effect: NoSchedule
- key: node.kubernetes.io/unreachable
  operator: Exists
  effect: NoExecute
  tolerationSeconds: 300
`

// The tolerations of platform, as JSON.
const (
	dedicated   = `{"key":"platform.example.com/dedicated","operator":"Exists","effect":"NoSchedule"}`
	unreachable = `{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}`
)

func mustParse(t *testing.T, settings string) Settings {
	t.Helper()
	s, err := ParseSettings([]byte(settings))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPlace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings string
		object   string
		// want is the object that comes back; empty: the object as it came, byte for byte.
		want string
	}{
		{name: "Deployment: selector merged, the settings win; tolerations appended",
			object: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns","namespace":"kube-system"},
				"spec":{"progressDeadlineSeconds":9007199254740993,"template":{"spec":{
				"nodeSelector":{"kubernetes.io/os":"windows","zone":"a"},
				"tolerations":[{"key":"CriticalAddonsOnly","operator":"Exists"}],
				"containers":[{"name":"coredns","image":"registry.k8s.io/coredns/coredns:v1.12.1"}]}}}}`,
			want: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns","namespace":"kube-system"},
				"spec":{"progressDeadlineSeconds":9007199254740993,"template":{"spec":{
				"nodeSelector":{"kubernetes.io/os":"linux","zone":"a","platform.example.com/pool":"system"},
				"tolerations":[{"key":"CriticalAddonsOnly","operator":"Exists"},` + dedicated + `,` + unreachable + `],
				"containers":[{"name":"coredns","image":"registry.k8s.io/coredns/coredns:v1.12.1"}]}}}}`},
		{name: "DaemonSet without either",
			object: `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"kube-proxy"},
				"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy"}]}}}}`,
			want: `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"kube-proxy"},
				"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy"}],
				"nodeSelector":{"kubernetes.io/os":"linux","platform.example.com/pool":"system"},
				"tolerations":[` + dedicated + `,` + unreachable + `]}}}}`},
		{name: "StatefulSet with one of the tolerations: not repeated",
			object: `{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"db"},
				"spec":{"template":{"spec":{"tolerations":[` + unreachable + `]}}}}`,
			want: `{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"db"},
				"spec":{"template":{"spec":{"tolerations":[` + unreachable + `,` + dedicated + `],
				"nodeSelector":{"kubernetes.io/os":"linux","platform.example.com/pool":"system"}}}}}`},
		{name: "StatefulSet with a toleration that differs in tolerationSeconds: appended",
			object: `{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"db"},
				"spec":{"template":{"spec":{"tolerations":[
				{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":30}]}}}}`,
			want: `{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"db"},
				"spec":{"template":{"spec":{"tolerations":[
				{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":30},
				` + dedicated + `,` + unreachable + `],
				"nodeSelector":{"kubernetes.io/os":"linux","platform.example.com/pool":"system"}}}}}`},
		{name: "Job",
			object: `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"migrate"},
				"spec":{"backoffLimit":2,"template":{"spec":{"restartPolicy":"Never"}}}}`,
			want: `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"migrate"},
				"spec":{"backoffLimit":2,"template":{"spec":{"restartPolicy":"Never",
				"nodeSelector":{"kubernetes.io/os":"linux","platform.example.com/pool":"system"},
				"tolerations":[` + dedicated + `,` + unreachable + `]}}}}`},
		{name: "CronJob: its job template",
			object: `{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"backup"},
				"spec":{"schedule":"0 3 * * *","jobTemplate":{"spec":{"template":{"spec":{"restartPolicy":"OnFailure"}}}}}}`,
			want: `{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"backup"},
				"spec":{"schedule":"0 3 * * *","jobTemplate":{"spec":{"template":{"spec":{"restartPolicy":"OnFailure",
				"nodeSelector":{"kubernetes.io/os":"linux","platform.example.com/pool":"system"},
				"tolerations":[` + dedicated + `,` + unreachable + `]}}}}}}`},
		{name: "a Deployment that has it all comes back as it came",
			object: `{"apiVersion":"apps/v1", "kind":"Deployment", "metadata":{"name":"x"}, "spec":{"template":{"spec":{
				"nodeSelector":{"platform.example.com/pool":"system","kubernetes.io/os":"linux"},
				"tolerations":[` + unreachable + `,` + dedicated + `]}}}}`},
		{name: "an empty operator is Equal",
			settings: `tolerations: [{key: example.com/gpu, value: "true", effect: NoSchedule}]`,
			object: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"template":{"spec":{
				"tolerations":[{"key":"example.com/gpu","operator":"Equal","value":"true","effect":"NoSchedule"}]}}}}`},
		{name: "a ConfigMap comes back as it came",
			object: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"coredns"},"data":{"Corefile":".:53 {\n}"}}`},
		{name: "a Deployment of another group is not a workload",
			object: `{"apiVersion":"example.com/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"template":{"spec":{}}}}`},
		{name: "empty settings change nothing", settings: `{}`,
			object: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settings := tc.settings
			if settings == "" {
				settings = platform
			}
			configMap := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"before"}}`
			objects := []runtime.RawExtension{{Raw: []byte(configMap)}, {Raw: []byte(tc.object)}}
			got, changed, err := mustParse(t, settings).Place(objects)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || string(got[0].Raw) != configMap {
				t.Fatalf("the objects came back as %d, the first %s", len(got), got[0].Raw)
			}
			if tc.want == "" {
				if string(got[1].Raw) != tc.object || len(changed) != 0 {
					t.Errorf("changed %v:\n%s", changed, got[1].Raw)
				}
				return
			}
			if len(changed) != 1 {
				t.Errorf("changed %v", changed)
			}
			if diff := cmp.Diff(decode(t, tc.want), decode(t, string(got[1].Raw))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if !strings.Contains(string(got[1].Raw), "9007199254740993") && strings.Contains(tc.object, "9007199254740993") {
				t.Errorf("a large integer lost precision: %s", got[1].Raw)
			}
		})
	}
}

// decode decodes JSON with its numbers as written.
func decode(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return v
}

func TestPlaceRefusesMalformedObjects(t *testing.T) {
	for _, object := range []string{
		`not json`,
		`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{"spec":{"nodeSelector":"x"}}}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{"spec":{"tolerations":{}}}}}`,
		`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":7}}`,
		`{"apiVersion":"a/b/c","kind":"Deployment"}`,
	} {
		if _, _, err := mustParse(t, platform).Place([]runtime.RawExtension{{Raw: []byte(object)}}); err == nil {
			t.Errorf("%s was accepted", object)
		}
	}
}

func TestParseSettings(t *testing.T) {
	for _, tc := range []struct {
		name, settings, problem string
	}{
		{name: "JSON", settings: `{"nodeSelector":{"a":"b"},"tolerations":[{"operator":"Exists"}]}`},
		{name: "an unknown field", settings: "nodeSelectors: {a: b}", problem: "unknown field"},
		{name: "a bad label key", settings: "nodeSelector: {'a b': c}", problem: `nodeSelector key "a b"`},
		{name: "a bad label value", settings: "nodeSelector: {a: 'b c'}", problem: `nodeSelector["a"] value "b c"`},
		{name: "a bad operator", settings: "tolerations: [{key: a, operator: In}]", problem: `tolerations[0]: operator "In"`},
		{name: "Exists with a value", settings: "tolerations: [{key: a, operator: Exists, value: b}]", problem: "takes no value"},
		{name: "Equal without a key", settings: "tolerations: [{value: b}]", problem: "needs a key"},
		{name: "a bad effect", settings: "tolerations: [{key: a, operator: Exists, effect: Evict}]", problem: `effect "Evict"`},
		{name: "seconds without NoExecute", settings: "tolerations: [{key: a, operator: Exists, tolerationSeconds: 5}]",
			problem: "needs effect NoExecute"},
		{name: "not YAML", settings: "nodeSelector: [", problem: "yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSettings([]byte(tc.settings))
			switch {
			case tc.problem == "" && err != nil:
				t.Errorf("unexpected: %v", err)
			case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
				t.Errorf("got %v, want %q", err, tc.problem)
			}
		})
	}
}

// reviewer authenticates the one token of kaddons for the audience of "placement".
type reviewer struct{}

func (reviewer) Review(_ context.Context, token string, audiences []string) (*authenticationv1.TokenReviewStatus, error) {
	if token != "kaddons" || len(audiences) != 1 || audiences[0] != server.Audience("placement") {
		return &authenticationv1.TokenReviewStatus{}, nil
	}
	return &authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: audiences,
		User: authenticationv1.UserInfo{Username: server.DefaultAllowedUser}}, nil
}

// TestRenderCall calls the extension over HTTP as kaddons does.
func TestRenderCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.yaml")
	if err := os.WriteFile(path, []byte(platform), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	settings := &server.Settings[Settings]{Path: path, Parse: ParseSettings}
	srv := &server.Server{
		Auth:     &server.Authenticator{Reviewer: reviewer{}, Audience: server.Audience("placement"), AllowedUser: server.DefaultAllowedUser},
		Handlers: handlers(settings, log),
		Revision: settings.Revision,
		Log:      log,
	}
	request := `{"apiVersion":"hooks.addons.kaddons.dev/v1alpha1","kind":"RenderRequest",
		"addon":{"kind":"CoreDNS","namespace":"kube-system","name":"coredns"},"version":"1.12.1","objects":[
		{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"coredns"}},
		{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns"},"spec":{"template":{"spec":{}}}}]}`
	post := func(token string) (int, hooksv1alpha1.RenderResponse) {
		req := httptest.NewRequest(http.MethodPost, hooksv1alpha1.Render.Path(), strings.NewReader(request))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		var resp hooksv1alpha1.RenderResponse
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
		}
		return rec.Code, resp
	}

	for _, token := range []string{"", "someone"} {
		if code, _ := post(token); code != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", token, code)
		}
	}
	code, resp := post("kaddons")
	if code != http.StatusOK || resp.Status != hooksv1alpha1.StatusSuccess || resp.Kind != hooksv1alpha1.KindRenderResponse {
		t.Fatalf("%d %+v", code, resp)
	}
	if len(resp.Objects) != 2 || !strings.Contains(string(resp.Objects[1].Raw), "platform.example.com/dedicated") {
		t.Errorf("objects %s", resp.Objects)
	}

	// Broken settings: a Failure, which kaddons handles by the failurePolicy.
	if err := os.WriteFile(path, []byte("tolerations: [{operator: Sometimes}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, resp := post("kaddons"); code != http.StatusOK || resp.Status != hooksv1alpha1.StatusFailure ||
		!strings.Contains(resp.Message, `operator "Sometimes"`) {
		t.Errorf("%d %+v", code, resp)
	}
}
