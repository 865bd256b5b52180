// Package decodeerrors names the field of a value the JSON decoder
// refused. A request body whose spec.request is not base64, or whose
// duration is "30d", fails in decoding, before validation, and the decoder
// says only "illegal base64 data at input byte 3" or `time: unknown unit
// "d" in duration "30d"`: neither says which field. Wrap finds the field by
// decoding each value of the body on its own into its Go type.
package decodeerrors

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// Wrap returns ns with the decoders of its JSON and YAML serializers
// naming the field of a value they refuse. creater makes the object a body
// names in apiVersion and kind, whose Go type says how each field decodes.
//
// The wrapped list of serializers is made once: the handlers ask for it on
// every request.
func Wrap(ns runtime.NegotiatedSerializer, creater runtime.ObjectCreater) runtime.NegotiatedSerializer {
	return negotiated{NegotiatedSerializer: ns, infos: wrapInfos(ns.SupportedMediaTypes(), creater)}
}

type negotiated struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func (n negotiated) SupportedMediaTypes() []runtime.SerializerInfo { return n.infos }

func wrapInfos(infos []runtime.SerializerInfo, creater runtime.ObjectCreater) []runtime.SerializerInfo {
	out := make([]runtime.SerializerInfo, len(infos))
	for i, info := range infos {
		out[i] = info
		yamlBody := false
		switch info.MediaType {
		case runtime.ContentTypeJSON:
		case runtime.ContentTypeYAML:
			yamlBody = true
		default:
			continue
		}
		if info.Serializer != nil {
			out[i].Serializer = fieldSerializer{Serializer: info.Serializer, creater: creater, yaml: yamlBody}
		}
		if info.StrictSerializer != nil {
			out[i].StrictSerializer = fieldSerializer{Serializer: info.StrictSerializer, creater: creater, yaml: yamlBody}
		}
	}
	return out
}

type fieldSerializer struct {
	runtime.Serializer
	creater runtime.ObjectCreater
	yaml    bool
}

func (s fieldSerializer) Decode(data []byte, gvk *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, actual, err := s.Serializer.Decode(data, gvk, into)
	if err == nil {
		return obj, actual, nil
	}
	// A strict decoding error (unknown or duplicate fields) names its
	// fields already, and the handler tells it apart by its type.
	if _, strict := runtime.AsStrictDecodingError(err); strict {
		return obj, actual, err
	}
	if named := s.locate(data, gvk, actual); named != nil {
		return obj, actual, named
	}
	return obj, actual, err
}

// locate decodes the body generically and then each value on its own into
// the Go type of its field; the first value that fails names the field.
func (s fieldSerializer) locate(data []byte, defaultGVK, actual *schema.GroupVersionKind) error {
	if s.yaml {
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil
		}
		data = j
	}
	var body map[string]any
	if err := json.Unmarshal(data, &body); err != nil {
		return nil
	}
	gvk := schema.GroupVersionKind{}
	if actual != nil {
		gvk = *actual
	}
	if apiVersion, ok := body["apiVersion"].(string); ok && gvk.Version == "" {
		if gv, err := schema.ParseGroupVersion(apiVersion); err == nil {
			gvk.Group, gvk.Version = gv.Group, gv.Version
		}
	}
	if kind, ok := body["kind"].(string); ok && gvk.Kind == "" {
		gvk.Kind = kind
	}
	if defaultGVK != nil {
		if gvk.Kind == "" {
			gvk.Kind = defaultGVK.Kind
		}
		if gvk.Version == "" {
			gvk.Group, gvk.Version = defaultGVK.Group, defaultGVK.Version
		}
	}
	obj, err := s.creater.New(gvk)
	if err != nil {
		return nil
	}
	return find(reflect.TypeOf(obj), body, "")
}

var (
	durationType    = reflect.TypeOf(metav1.Duration{})
	unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
)

// find returns the first field under path whose value v does not decode
// into t, as "path: what is wrong", or nil.
func find(t reflect.Type, v any, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil
	}
	switch {
	case t == durationType:
		s, ok := v.(string)
		if !ok {
			return nil
		}
		if _, err := time.ParseDuration(s); err != nil {
			return fmt.Errorf("%s: %q is not a duration: write hours, minutes and seconds, such as 720h0m0s or 10m (units h, m, s; no d or y)", path, s)
		}
		return nil
	case reflect.PointerTo(t).Implements(unmarshalerType):
		// A type of its own decoding (a time, a quantity): decode the
		// value alone.
		raw, err := json.Marshal(v)
		if err != nil {
			return nil
		}
		if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		s, ok := v.(string)
		if !ok {
			return nil
		}
		if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			return fmt.Errorf("%s: must be base64 (%v): encode the data, e.g. with base64 -w0", path, err)
		}
		return nil
	case t.Kind() == reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return wrongType(path, "an object", v)
		}
		return findInStruct(t, m, path)
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		items, ok := v.([]any)
		if !ok {
			return wrongType(path, "an array", v)
		}
		for i, item := range items {
			if err := find(t.Elem(), item, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return wrongType(path, "an object", v)
		}
		for k, item := range m {
			if err := find(t.Elem(), item, path+"["+k+"]"); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.String:
		if _, ok := v.(string); !ok {
			return wrongType(path, "a string", v)
		}
	case t.Kind() == reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wrongType(path, "a boolean", v)
		}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		n, ok := v.(float64)
		if !ok {
			return wrongType(path, "an integer", v)
		}
		if n != math.Trunc(n) {
			return fmt.Errorf("%s: must be an integer, not a number with a fraction", path)
		}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		if _, ok := v.(float64); !ok {
			return wrongType(path, "a number", v)
		}
	}
	return nil
}

// wrongType says that the value at path is of another JSON type than the
// field takes, in JSON's words: the decoder's own message names Go structs
// and types ("cannot unmarshal string into Go struct field
// CertificateSigningRequestSpec.spec.expirationSeconds of type int32"),
// which a user writing YAML does not know.
func wrongType(path, want string, v any) error {
	return fmt.Errorf("%s: must be %s, not %s", path, want, jsonType(v))
}

// jsonType names the JSON type of a value decoded into any.
func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "null"
}

func findInStruct(t reflect.Type, m map[string]any, path string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			if err := find(f.Type, m, path); err != nil {
				return err
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		v, ok := m[name]
		if !ok {
			continue
		}
		child := name
		if path != "" {
			child = path + "." + name
		}
		if err := find(f.Type, v, child); err != nil {
			return err
		}
	}
	return nil
}

var _ runtime.Serializer = fieldSerializer{}
