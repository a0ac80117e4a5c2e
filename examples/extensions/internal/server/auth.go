package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// DefaultAllowedUser is the user kaddons calls extensions as in an install of
// config/default: its controller manager's ServiceAccount.
const DefaultAllowedUser = "system:serviceaccount:kaddons-system:kaddons-controller-manager"

// Audience is the audience of the tokens kaddons sends to the extension registered by the
// AddonExtension called name. It is kaddons' convention
// (github.com/kaddons/kaddons/internal/extensions.Audience), copied here so that an
// extension does not link the operator's packages; a test checks they agree.
func Audience(name string) string { return "addons.kaddons.dev/extension/" + name }

// reviewTimeout bounds one TokenReview.
const reviewTimeout = 10 * time.Second

// cacheTTL is how long a token that passed is accepted without asking the API server
// again: kaddons reuses a token for most of its hour, and a reconcile may call a hook
// several times. A token revoked meanwhile is accepted at most this long.
const cacheTTL = time.Minute

// maxCached caps the tokens remembered.
const maxCached = 64

// TokenReviewer asks the API server who a bearer token authenticates, for audiences.
type TokenReviewer interface {
	Review(ctx context.Context, token string, audiences []string) (*authenticationv1.TokenReviewStatus, error)
}

// ClientTokenReviewer is the TokenReviewer of a clientset: its ServiceAccount needs
// create on tokenreviews and nothing else.
type ClientTokenReviewer struct {
	// Client is a clientset's AuthenticationV1(), or the client of that group alone.
	Client authenticationv1client.TokenReviewsGetter
}

// Review creates a TokenReview.
func (c ClientTokenReviewer) Review(ctx context.Context, token string, audiences []string) (*authenticationv1.TokenReviewStatus, error) {
	review, err := c.Client.TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return &review.Status, nil
}

// Authenticator accepts the calls that carry a token for its audience of its allowed
// user, checked with a TokenReview.
type Authenticator struct {
	// Reviewer asks the API server.
	Reviewer TokenReviewer
	// Audience is the audience a token must be for: Audience of the AddonExtension's name.
	Audience string
	// AllowedUser is the only user accepted.
	AllowedUser string
	// now is the clock of the cache; nil is time.Now.
	now func() time.Time

	mu     sync.Mutex
	passed map[[sha256.Size]byte]time.Time
}

// Authenticate checks the Authorization header of a call. It returns the user, or the
// HTTP status to answer and why: 401 for a missing token, one the API server does not
// authenticate for the audience, or another user's; 503 when the API server cannot be
// asked (kaddons retries).
func (a *Authenticator) Authenticate(ctx context.Context, header string) (string, int, error) {
	scheme, token, ok := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", http.StatusUnauthorized, errors.New("no bearer token")
	}
	key := sha256.Sum256([]byte(token))
	if a.cached(key) {
		return a.AllowedUser, 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	status, err := a.Reviewer.Review(ctx, token, []string{a.Audience})
	if err != nil {
		return "", http.StatusServiceUnavailable, fmt.Errorf("reviewing the token: %w", err)
	}
	switch {
	case !status.Authenticated:
		return "", http.StatusUnauthorized, fmt.Errorf("the token is not authenticated for audience %s: %s", a.Audience, status.Error)
	// An authenticator that ignores audiences returns none: the token may be one
	// minted for another extension, or kaddons' API token.
	case !slices.Contains(status.Audiences, a.Audience):
		return "", http.StatusUnauthorized, fmt.Errorf("the token is not for audience %s (the review says %v)", a.Audience, status.Audiences)
	case status.User.Username != a.AllowedUser:
		return "", http.StatusUnauthorized, fmt.Errorf("user %q is not the allowed user %q", status.User.Username, a.AllowedUser)
	}
	a.remember(key)
	return status.User.Username, 0, nil
}

func (a *Authenticator) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// cached tells whether the token with digest key passed within cacheTTL.
func (a *Authenticator) cached(key [sha256.Size]byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	until, ok := a.passed[key]
	return ok && a.clock().Before(until)
}

// remember records that the token with digest key passed.
func (a *Authenticator) remember(key [sha256.Size]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock()
	if a.passed == nil {
		a.passed = map[[sha256.Size]byte]time.Time{}
	}
	if len(a.passed) >= maxCached {
		for k, until := range a.passed {
			if !now.Before(until) {
				delete(a.passed, k)
			}
		}
		if len(a.passed) >= maxCached {
			clear(a.passed)
		}
	}
	a.passed[key] = now.Add(cacheTTL)
}
