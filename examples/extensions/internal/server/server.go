// Package server is what the example extensions of kaddons share: an HTTPS server with
// a certificate of its own that authenticates every call with a TokenReview, decodes
// the requests of api/hooks/v1alpha1, answers discovery with the hooks it serves and the
// revision of its settings file, and hands each hook call to the extension's handler
// (docs/extensions.md describes the contract).
//
// An extension's main calls Main with the parser of its settings file and its handlers;
// everything else (flags, TLS, authentication, logging, graceful shutdown) is here.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	hooksv1alpha1 "github.com/kaddons/kaddons/api/hooks/v1alpha1"
)

// MaxRequestBytes caps the body of a request: an add-on's rendered objects fit with
// room to spare, and a larger body is refused with 413 before it is decoded.
const MaxRequestBytes = 16 << 20

// Handlers answer the hooks an extension serves; a nil handler is a hook it does not
// serve (discovery does not list it, and a call gets 404). A handler's error becomes a
// response with status Failure and the error as its message, which kaddons handles by
// the AddonExtension's failurePolicy. The server sets the response's apiVersion and kind,
// and its status to Success unless the handler set it.
type Handlers struct {
	Validate      func(context.Context, *hooksv1alpha1.ValidateRequest) (*hooksv1alpha1.ValidateResponse, error)
	Render        func(context.Context, *hooksv1alpha1.RenderRequest) (*hooksv1alpha1.RenderResponse, error)
	BeforeUpgrade func(context.Context, *hooksv1alpha1.BeforeUpgradeRequest) (*hooksv1alpha1.BeforeUpgradeResponse, error)
	AfterReady    func(context.Context, *hooksv1alpha1.AfterReadyRequest) (*hooksv1alpha1.AfterReadyResponse, error)
	BeforeDelete  func(context.Context, *hooksv1alpha1.BeforeDeleteRequest) (*hooksv1alpha1.BeforeDeleteResponse, error)
}

// Server is the http.Handler of an extension: /healthz, the discovery endpoint and the
// hooks of Handlers, below any base path.
type Server struct {
	// Auth authenticates every call but /healthz.
	Auth *Authenticator
	// Handlers answer the hooks.
	Handlers Handlers
	// Revision is the revision discovery reports (that of the settings file); an error
	// makes discovery answer Failure, so the AddonExtension shows the extension is not
	// usable.
	Revision func() (string, error)
	// Log receives a line per call; required.
	Log *slog.Logger

	routes map[string]*route
}

// route is one hook the server answers.
type route struct {
	hook        hooksv1alpha1.Hook
	requestKind string
	// answer decodes body and returns the response; an error is a malformed request.
	answer func(ctx context.Context, body []byte) (any, error)
}

// routeOf makes the route of hook from its handler, nil when the hook is not served.
// common points into a response at the fields the server fills in.
func routeOf[Req, Resp any](hook hooksv1alpha1.Hook, requestKind, responseKind string, handler func(context.Context, *Req) (*Resp, error),
	common func(*Resp) (*hooksv1alpha1.TypeMeta, *hooksv1alpha1.CommonResponse)) *route {
	if handler == nil {
		return nil
	}
	return &route{hook: hook, requestKind: requestKind, answer: func(ctx context.Context, body []byte) (any, error) {
		req := new(Req)
		if err := json.Unmarshal(body, req); err != nil {
			return nil, err
		}
		resp, err := handler(ctx, req)
		if err == nil && resp == nil {
			err = errors.New("the extension has no answer")
		}
		if err != nil {
			resp = new(Resp)
			_, c := common(resp)
			c.Status, c.Message = hooksv1alpha1.StatusFailure, err.Error()
		}
		typeMeta, c := common(resp)
		*typeMeta = hooksv1alpha1.TypeMeta{APIVersion: hooksv1alpha1.GroupVersion, Kind: responseKind}
		if c.Status == "" {
			c.Status = hooksv1alpha1.StatusSuccess
		}
		return resp, nil
	}}
}

// init builds the routes of s.Handlers.
func (s *Server) init() {
	if s.routes != nil {
		return
	}
	h := s.Handlers
	routes := []*route{
		routeOf(hooksv1alpha1.Validate, hooksv1alpha1.KindValidateRequest, hooksv1alpha1.KindValidateResponse, h.Validate,
			func(r *hooksv1alpha1.ValidateResponse) (*hooksv1alpha1.TypeMeta, *hooksv1alpha1.CommonResponse) {
				return &r.TypeMeta, &r.CommonResponse
			}),
		routeOf(hooksv1alpha1.Render, hooksv1alpha1.KindRenderRequest, hooksv1alpha1.KindRenderResponse, h.Render,
			func(r *hooksv1alpha1.RenderResponse) (*hooksv1alpha1.TypeMeta, *hooksv1alpha1.CommonResponse) {
				return &r.TypeMeta, &r.CommonResponse
			}),
		routeOf(hooksv1alpha1.BeforeUpgrade, hooksv1alpha1.KindBeforeUpgradeRequest, hooksv1alpha1.KindBeforeUpgradeResponse, h.BeforeUpgrade,
			func(r *hooksv1alpha1.BeforeUpgradeResponse) (*hooksv1alpha1.TypeMeta, *hooksv1alpha1.CommonResponse) {
				return &r.TypeMeta, &r.CommonResponse
			}),
		routeOf(hooksv1alpha1.AfterReady, hooksv1alpha1.KindAfterReadyRequest, hooksv1alpha1.KindAfterReadyResponse, h.AfterReady,
			func(r *hooksv1alpha1.AfterReadyResponse) (*hooksv1alpha1.TypeMeta, *hooksv1alpha1.CommonResponse) {
				return &r.TypeMeta, &r.CommonResponse
			}),
		routeOf(hooksv1alpha1.BeforeDelete, hooksv1alpha1.KindBeforeDeleteRequest, hooksv1alpha1.KindBeforeDeleteResponse, h.BeforeDelete,
			func(r *hooksv1alpha1.BeforeDeleteResponse) (*hooksv1alpha1.TypeMeta, *hooksv1alpha1.CommonResponse) {
				return &r.TypeMeta, &r.CommonResponse
			}),
	}
	s.routes = map[string]*route{}
	for _, r := range routes {
		if r != nil {
			s.routes[strings.TrimPrefix(r.hook.Path(), hooksv1alpha1.PathPrefix)] = r
		}
	}
}

// served lists the hooks the server answers, in the order of an add-on's lifecycle.
func (s *Server) served() []hooksv1alpha1.HookHandler {
	var hooks []hooksv1alpha1.HookHandler
	for _, h := range hooksv1alpha1.Hooks {
		if _, ok := s.routes[strings.TrimPrefix(h.Path(), hooksv1alpha1.PathPrefix)]; ok {
			hooks = append(hooks, hooksv1alpha1.HookHandler{Name: h, APIVersion: hooksv1alpha1.GroupVersion})
		}
	}
	return hooks
}

// ServeHTTP answers /healthz, and the discovery endpoint and the hooks below any base
// path (the path of the AddonExtension's URL or Service).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.init()
	if r.URL.Path == "/healthz" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	i := strings.LastIndex(r.URL.Path, hooksv1alpha1.PathPrefix)
	if i < 0 {
		http.NotFound(w, r)
		return
	}
	name := r.URL.Path[i+len(hooksv1alpha1.PathPrefix):]
	route, served := s.routes[name]
	if name != "discovery" && !served {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	start := time.Now()
	log := s.Log.With("hook", name, "remote", r.RemoteAddr)
	// Authenticate before reading the body: an unauthenticated client makes the server
	// buffer nothing.
	user, status, err := s.Auth.Authenticate(r.Context(), r.Header.Get("Authorization"))
	if err != nil {
		log.Warn("refused a call", "status", status, "error", err)
		http.Error(w, http.StatusText(status), status)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			log.Warn("refused a request larger than the cap", "user", user, "maxBytes", MaxRequestBytes)
			http.Error(w, fmt.Sprintf("the request is larger than %d bytes", MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		log.Warn("reading a request", "user", user, "error", err)
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	wantKind := hooksv1alpha1.KindDiscoveryRequest
	if served {
		wantKind = route.requestKind
	}
	if err := checkTypeMeta(body, wantKind); err != nil {
		log.Warn("refused a malformed request", "user", user, "error", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var resp any
	if served {
		resp, err = route.answer(r.Context(), body)
		if err != nil {
			log.Warn("refused a malformed request", "user", user, "error", err)
			http.Error(w, "decoding the "+wantKind+": "+err.Error(), http.StatusBadRequest)
			return
		}
	} else {
		resp = s.discovery()
	}
	data, err := json.Marshal(resp)
	if err != nil {
		log.Error("encoding a response", "error", err)
		http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
	level := slog.LevelInfo
	if !served {
		level = slog.LevelDebug // every few minutes per AddonExtension
	}
	log.Log(r.Context(), level, "answered", "user", user, "duration", time.Since(start).Round(time.Microsecond),
		"responseBytes", len(data))
}

// discovery is the answer of the discovery endpoint.
func (s *Server) discovery() *hooksv1alpha1.DiscoveryResponse {
	resp := &hooksv1alpha1.DiscoveryResponse{
		TypeMeta:       hooksv1alpha1.TypeMeta{APIVersion: hooksv1alpha1.GroupVersion, Kind: hooksv1alpha1.KindDiscoveryResponse},
		CommonResponse: hooksv1alpha1.CommonResponse{Status: hooksv1alpha1.StatusSuccess},
		Hooks:          s.served(),
	}
	if s.Revision != nil {
		revision, err := s.Revision()
		if err != nil {
			resp.Status, resp.Message = hooksv1alpha1.StatusFailure, err.Error()
		}
		resp.Revision = revision
	}
	return resp
}

// checkTypeMeta checks that body is a JSON object of apiVersion
// hooks.addons.kaddons.dev/v1alpha1 and kind.
func checkTypeMeta(body []byte, kind string) error {
	var typeMeta hooksv1alpha1.TypeMeta
	if err := json.Unmarshal(body, &typeMeta); err != nil {
		return fmt.Errorf("the request is not a JSON %s: %w", kind, err)
	}
	if typeMeta.APIVersion != hooksv1alpha1.GroupVersion || typeMeta.Kind != kind {
		return fmt.Errorf("the request is apiVersion %q, kind %q; want %s, %s", typeMeta.APIVersion, typeMeta.Kind,
			hooksv1alpha1.GroupVersion, kind)
	}
	return nil
}
