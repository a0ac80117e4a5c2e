package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/kaddons/kaddons/internal/channels"
)

// CapabilitiesTTL is how long ClusterCapabilities keeps what discovery returned. An API
// a new CRD or aggregated server adds reaches the charts' .Capabilities within it.
const CapabilitiesTTL = 5 * time.Minute

// ClusterCapabilities reads the live cluster's Kubernetes version and the API versions
// it serves, which a Helm chart package sees as .Capabilities, as `helm install` does
// (not `helm template`, which reports the SDK's defaults). Discovery is asked at most
// once per CapabilitiesTTL for every add-on together, and only when a chart is rendered:
// a reconcile of a chart add-on that changes nothing costs no request. It is safe for
// concurrent use.
type ClusterCapabilities struct {
	discovery discovery.DiscoveryInterface
	version   func(context.Context) (string, error)
	ttl       time.Duration
	now       func() time.Time

	mu   sync.Mutex
	caps channels.Capabilities
	read time.Time
}

// NewClusterCapabilities returns the ClusterCapabilities of the cluster of cfg. version
// reads the cluster's version, as OperatorIdentity.KubernetesVersion does (pass the same
// function, so that both share its reads); nil reads it with ClusterVersion.
func NewClusterCapabilities(cfg *rest.Config, version func(context.Context) (string, error)) (*ClusterCapabilities, error) {
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the discovery client: %w", err)
	}
	if version == nil {
		version = ClusterVersion(d, CapabilitiesTTL)
	}
	return &ClusterCapabilities{discovery: d, version: version, ttl: CapabilitiesTTL, now: time.Now}, nil
}

// Get returns the cluster's capabilities: from memory when read less than the TTL ago.
// An API group whose discovery fails (an aggregated server that is down) is left out,
// as Helm leaves it out; a cluster that answers nothing is an error, retried.
func (c *ClusterCapabilities) Get(ctx context.Context) (channels.Capabilities, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.read.IsZero() && c.now().Sub(c.read) < c.ttl {
		return c.caps, nil
	}
	version, err := c.version(ctx)
	if err != nil {
		return channels.Capabilities{}, fmt.Errorf("reading the cluster's version for a chart's .Capabilities: %w", err)
	}
	_, lists, err := c.discovery.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return channels.Capabilities{}, fmt.Errorf("reading the cluster's API versions for a chart's .Capabilities: %w", err)
	}
	var versions []string
	for _, list := range lists {
		versions = append(versions, list.GroupVersion)
		for _, res := range list.APIResources {
			if !strings.Contains(res.Name, "/") {
				versions = append(versions, list.GroupVersion+"/"+res.Kind)
			}
		}
	}
	slices.Sort(versions)
	c.caps = channels.Capabilities{KubeVersion: version, APIVersions: slices.Compact(versions)}
	c.read = c.now()
	return c.caps, nil
}
