package engine

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper counts the RESTMapping questions that reach it.
type countingMapper struct {
	meta.RESTMapper
	asked int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.asked++
	return c.RESTMapper.RESTMapping(gk, versions...)
}

func TestMemoizedMapperAsksOncePerKindAndVersion(t *testing.T) {
	g := NewWithT(t)
	deployments := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	roles := schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}
	inner := meta.NewDefaultRESTMapper([]schema.GroupVersion{roles.GroupVersion()})
	inner.Add(deployments, meta.RESTScopeNamespace)
	inner.Add(roles, meta.RESTScopeRoot)
	counting := &countingMapper{RESTMapper: inner}
	m := MemoizedMapper(counting)
	g.Expect(MemoizedMapper(m)).To(BeIdenticalTo(m), "wrapping twice wraps once")

	for range 3 {
		mapping, err := m.RESTMapping(deployments.GroupKind(), "v1")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(mapping.Resource).To(Equal(deployments.GroupVersion().WithResource("deployments")))
		g.Expect(mapping.Scope.Name()).To(Equal(meta.RESTScopeNameNamespace))
	}
	g.Expect(counting.asked).To(Equal(1), "the same kind and version is asked once")

	mapping, err := m.RESTMapping(roles.GroupKind())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mapping.Scope.Name()).To(Equal(meta.RESTScopeNameRoot))
	_, _ = m.RESTMapping(roles.GroupKind())
	g.Expect(counting.asked).To(Equal(2), "a question without a version is remembered apart")

	// Each caller gets its own copy: changing one changes no later answer.
	mapping.Resource.Resource = "changed"
	again, err := m.RESTMapping(roles.GroupKind())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Resource.Resource).To(Equal("clusterroles"))

	// Several versions are not remembered.
	_, _ = m.RESTMapping(deployments.GroupKind(), "v1", "v1beta1")
	_, _ = m.RESTMapping(deployments.GroupKind(), "v1", "v1beta1")
	g.Expect(counting.asked).To(Equal(4), "each question of several versions reaches the mapper")
}

func TestMemoizedMapperDoesNotRememberAFailure(t *testing.T) {
	g := NewWithT(t)
	widgets := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	inner := meta.NewDefaultRESTMapper(nil)
	counting := &countingMapper{RESTMapper: inner}
	m := MemoizedMapper(counting)

	_, err := m.RESTMapping(widgets.GroupKind(), "v1")
	g.Expect(meta.IsNoMatchError(err)).To(BeTrue())
	// The CRD is installed: the next question reaches the mapper and finds it.
	inner.Add(widgets, meta.RESTScopeNamespace)
	mapping, err := m.RESTMapping(widgets.GroupKind(), "v1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mapping.Scope.Name()).To(Equal(meta.RESTScopeNameNamespace))
	g.Expect(counting.asked).To(Equal(2))
}
