// Package kubeadm reads the CoreDNS objects that kubeadm creates, kept as test data in
// test/testdata/kubeadm and rendered by the pinned kubeadm (hack/kubeadm-manifests.sh),
// so that tests of adoption and Corefile migration start from kubeadm's real objects
// rather than hand-written look-alikes.
package kubeadm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The test data files, in test/testdata/kubeadm.
const (
	// Plain is kubeadm's output, unchanged.
	Plain = "coredns.yaml"
	// Custom is Plain with the Corefile an admin edited: a hosts block in the .:53
	// server and an extra server block for a stub domain.
	Custom = "coredns-custom.yaml"
	// RemovedPlugin is Custom with the stub-domain server on a plugin that no CoreDNS
	// version kaddons ships has any more.
	RemovedPlugin = "coredns-removed-plugin.yaml"
)

// Names of the objects kubeadm creates for CoreDNS (cmd/kubeadm/app/phases/addons/dns).
const (
	Namespace       = "kube-system"
	DeploymentName  = "coredns"
	ConfigMapName   = "coredns"
	CorefileKey     = "Corefile"
	ServiceName     = "kube-dns"
	ServiceAccount  = "coredns"
	ClusterRoleName = "system:coredns"
	// Image is the CoreDNS image kubeadm deploys, without its tag.
	Image = "registry.k8s.io/coredns/coredns"
)

// Dir returns test/testdata/kubeadm of the module that holds the working directory, so
// that a test in any package of the module finds the files.
func Dir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "test", "testdata", "kubeadm"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Load decodes the objects of one test data file (Plain, Custom or RemovedPlugin)
// strictly: an unknown or duplicate field, or a kind that client-go's scheme does not
// know, is an error, so a file kubeadm did not write fails to load.
func Load(name string) ([]client.Object, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	return Decode(data)
}

// Decode decodes a multi-document YAML stream into typed objects, strictly (see Load).
// Documents that hold only comments, such as the header of a test data file, are skipped.
func Decode(data []byte) ([]client.Object, error) {
	decoder := json.NewSerializerWithOptions(json.DefaultMetaFactory, clientgoscheme.Scheme, clientgoscheme.Scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []client.Object
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if onlyComments(doc) {
			continue
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		cobj, ok := obj.(client.Object)
		if !ok {
			return nil, fmt.Errorf("document %d: %T is not an object with metadata", i, obj)
		}
		objs = append(objs, cobj)
	}
}

func onlyComments(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && line != "---" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// Find returns the object of type T with the given namespace and name, or nil.
func Find[T client.Object](objs []client.Object, namespace, name string) T {
	var zero T
	for _, obj := range objs {
		if typed, ok := obj.(T); ok && obj.GetNamespace() == namespace && obj.GetName() == name {
			return typed
		}
	}
	return zero
}

// Corefile returns the Corefile of kubeadm's CoreDNS ConfigMap.
func Corefile(objs []client.Object) (string, error) {
	cm := Find[*corev1.ConfigMap](objs, Namespace, ConfigMapName)
	if cm == nil {
		return "", fmt.Errorf("no ConfigMap %s/%s", Namespace, ConfigMapName)
	}
	corefile, ok := cm.Data[CorefileKey]
	if !ok {
		return "", fmt.Errorf("ConfigMap %s/%s has no %s key", Namespace, ConfigMapName, CorefileKey)
	}
	return corefile, nil
}

// CoreDNSVersion returns the CoreDNS version of kubeadm's Deployment, read from its image
// tag as kubeadm does (DeployedDNSAddon), without the leading "v" (as corefile-migration
// takes it). The image must be kubeadm's: Image, tagged.
func CoreDNSVersion(objs []client.Object) (string, error) {
	deploy := Find[*appsv1.Deployment](objs, Namespace, DeploymentName)
	if deploy == nil {
		return "", fmt.Errorf("no Deployment %s/%s", Namespace, DeploymentName)
	}
	containers := deploy.Spec.Template.Spec.Containers
	if len(containers) != 1 {
		return "", fmt.Errorf("deployment %s/%s has %d containers, want 1", Namespace, DeploymentName, len(containers))
	}
	tag, found := strings.CutPrefix(containers[0].Image, Image+":")
	if !found || tag == "" {
		return "", fmt.Errorf("deployment %s/%s runs %q, want %s:<version>", Namespace, DeploymentName, containers[0].Image, Image)
	}
	return strings.TrimPrefix(tag, "v"), nil
}
