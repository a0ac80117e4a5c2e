package extensions

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"
)

// tokenLifetime is how long a token kaddons asks for is valid; it is asked for again
// when less than a fifth of it is left.
const tokenLifetime = time.Hour

// ServiceAccountTokens mints tokens of one ServiceAccount (kaddons' own) with the
// TokenRequest API, one per audience, and reuses each until it nears its expiry.
type ServiceAccountTokens struct {
	// ServiceAccounts is the API of ServiceAccounts (a clientset's CoreV1()).
	ServiceAccounts corev1client.ServiceAccountsGetter
	// ServiceAccount is the ServiceAccount whose tokens are minted.
	ServiceAccount types.NamespacedName

	mu     sync.Mutex
	tokens map[string]*authenticationv1.TokenRequestStatus
}

// Token returns a token of the ServiceAccount for audience.
func (s *ServiceAccountTokens) Token(ctx context.Context, audience string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tokens[audience]; ok && time.Until(t.ExpirationTimestamp.Time) > tokenLifetime/5 {
		return t.Token, nil
	}
	if s.ServiceAccount.Name == "" {
		return "", fmt.Errorf("kaddons does not run as a ServiceAccount: it has no token to give extensions " +
			"(set POD_NAMESPACE and POD_SERVICE_ACCOUNT)")
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second))}}
	resp, err := s.ServiceAccounts.ServiceAccounts(s.ServiceAccount.Namespace).CreateToken(ctx, s.ServiceAccount.Name, req,
		metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token of ServiceAccount %s: %w", s.ServiceAccount, err)
	}
	if s.tokens == nil {
		s.tokens = map[string]*authenticationv1.TokenRequestStatus{}
	}
	s.tokens[audience] = &resp.Status
	return resp.Status.Token, nil
}

// serviceAccountPrefix starts the user name of every ServiceAccount.
const serviceAccountPrefix = "system:serviceaccount:"

// OwnServiceAccount returns the ServiceAccount kaddons runs as: POD_NAMESPACE and
// POD_SERVICE_ACCOUNT when both are set (config/manager sets them from the Pod), else
// the user the API server authenticates it as (SelfSubjectReview), when that is a
// ServiceAccount. It returns an empty name when kaddons runs as another user: calls to
// extensions then fail, each with an error that says so.
func OwnServiceAccount(ctx context.Context, reviews authenticationv1client.SelfSubjectReviewsGetter) (types.NamespacedName, error) {
	if ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_SERVICE_ACCOUNT"); ns != "" && name != "" {
		return types.NamespacedName{Namespace: ns, Name: name}, nil
	}
	review, err := reviews.SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return types.NamespacedName{}, fmt.Errorf("asking the API server who kaddons runs as: %w", err)
	}
	user := review.Status.UserInfo.Username
	ns, name, ok := strings.Cut(strings.TrimPrefix(user, serviceAccountPrefix), ":")
	if !strings.HasPrefix(user, serviceAccountPrefix) || !ok {
		return types.NamespacedName{}, nil
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}
