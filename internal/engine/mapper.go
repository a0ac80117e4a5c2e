package engine

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// MemoizedMapper wraps mapper so that RESTMapping answers a kind and version it has
// answered before from memory.
//
// Every apply of a child asks the manager's RESTMapper for the child's resource (the
// client, to build the request path) and for its scope (the render's namespace transform),
// and controller-runtime's dynamic mapper answers each question by walking a priority
// list over every group it knows, allocating the candidate mappings anew: a few percent of
// the manager's CPU per new add-on, and a tenth of what it allocates.
//
// Only successful look-ups of at most one version are remembered: a kind the mapper does
// not know yet still reaches it, so that it discovers a new CustomResourceDefinition as
// before. A remembered mapping is never dropped, as the dynamic mapper itself never drops
// a group version it has discovered unless one of its own reloads fails; an object of a
// version the API server stopped serving is then refused by the API server rather than
// by the mapper. Each caller gets a copy of the remembered mapping.
func MemoizedMapper(mapper meta.RESTMapper) meta.RESTMapper {
	if _, ok := mapper.(*memoizedMapper); ok {
		return mapper
	}
	return &memoizedMapper{RESTMapper: mapper}
}

// memoizedMapper is MemoizedMapper's RESTMapper.
type memoizedMapper struct {
	meta.RESTMapper
	// mappings maps a mappingKey to the *meta.RESTMapping the wrapped mapper returned.
	mappings sync.Map
}

// mappingKey is one RESTMapping question: a kind and at most one version.
type mappingKey struct {
	gk      schema.GroupKind
	version string
}

// RESTMapping returns the mapping of gk in versions; see MemoizedMapper.
func (m *memoizedMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) > 1 {
		return m.RESTMapper.RESTMapping(gk, versions...)
	}
	key := mappingKey{gk: gk}
	if len(versions) == 1 {
		key.version = versions[0]
	}
	if cached, ok := m.mappings.Load(key); ok {
		mapping := *cached.(*meta.RESTMapping)
		return &mapping, nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	remembered := *mapping
	m.mappings.Store(key, &remembered)
	return mapping, nil
}
