package main

import (
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
)

// decoder turns rendered YAML into typed Kubernetes objects, strictly: a
// field the type does not have, a field given twice, a value of the wrong
// type, or a kind outside the scheme is an error. The scheme holds only the
// API groups the chart renders, so a new kind in the chart must be added
// here before it passes.
type decoder struct {
	strict runtime.Decoder
}

func newDecoder() (*decoder, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme,
		appsv1.AddToScheme,
		rbacv1.AddToScheme,
		autoscalingv2.AddToScheme,
		monitoringv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	opts := kjson.SerializerOptions{Yaml: true, Strict: true}
	return &decoder{strict: kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, opts)}, nil
}

// object is one decoded object and where it came from.
type object struct {
	Source string
	Obj    runtime.Object
}

// decode decodes d. The strict serializer returns the object together with
// a strict-decoding error when only strictness failed; either error fails.
func (dec *decoder) decode(d doc) (object, error) {
	obj, gvk, err := dec.strict.Decode([]byte(d.Content), nil, nil)
	if err != nil {
		return object{}, fmt.Errorf("%s: %s %q: %w", d.Source, d.Kind, d.Name, err)
	}
	if gvk.Kind != d.Kind {
		return object{}, fmt.Errorf("%s: decoded kind %s, the manifest says %s", d.Source, gvk.Kind, d.Kind)
	}
	return object{Source: d.Source, Obj: obj}, nil
}
