package sources_test

import (
	"context"
	"encoding/base64"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/registry"
	. "github.com/onsi/gomega"

	"github.com/kaddons/kaddons/internal/sources"
	"github.com/kaddons/kaddons/internal/sources/publish"
)

// staticKeychain answers the same credentials for every registry.
type staticKeychain struct{ user, pass string }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return &authn.Basic{Username: k.user, Password: k.pass}, nil
}

func TestOCIAuth(t *testing.T) {
	handler := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "puller" || pass != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	img, _, err := publish.Build(writeTree(t, "private"), publish.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publish.Push(context.Background(), img, host+"/private/channels:v1",
		publish.RegistryOptions{Insecure: true, Keychain: staticKeychain{"puller", "s3cret"}}); err != nil {
		t.Fatal(err)
	}
	dockerConfig := func(key, user, pass string) []byte {
		return []byte(`{"auths":{"` + key + `":{"auth":"` + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)) + `"}}}`)
	}
	cases := []struct {
		name       string
		auth       sources.Auth
		wantReason string
	}{
		{name: "username and password", auth: sources.Auth{Username: "puller", Password: "s3cret"}},
		{name: "a .dockerconfigjson", auth: sources.Auth{DockerConfigJSON: dockerConfig(host, "puller", "s3cret")}},
		{name: "a .dockerconfigjson keyed by URL", auth: sources.Auth{DockerConfigJSON: dockerConfig("http://"+host+"/v2/", "puller", "s3cret")}},
		{name: "a .dockerconfigjson for another registry", auth: sources.Auth{DockerConfigJSON: dockerConfig("other.example.com", "puller", "s3cret")},
			wantReason: sources.ReasonFetchFailed},
		{name: "a wrong password", auth: sources.Auth{Username: "puller", Password: "guess"}, wantReason: sources.ReasonFetchFailed},
		{name: "anonymous", wantReason: sources.ReasonFetchFailed},
		{name: "a broken .dockerconfigjson", auth: sources.Auth{DockerConfigJSON: []byte("{")}, wantReason: sources.ReasonInvalidSource},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			req := ociRequest(host + "/private/channels:v1")
			tc.auth.Insecure, tc.auth.InsecureLoopback = true, true
			req.Auth = tc.auth
			a, err := newFetcher(t, sources.Limits{}).Fetch(context.Background(), req)
			if tc.wantReason != "" {
				g.Expect(sources.ReasonOf(err)).To(Equal(tc.wantReason), "%v", err)
				g.Expect(sources.IsTransient(err)).To(BeFalse(), "%v", err)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(configValue(t, a)).To(Equal("private"))
		})
	}
}
