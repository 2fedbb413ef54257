package main

import (
	"reflect"
	"sort"
	"strconv"
	"strings"

	dpv1 "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
)

func reflectType[T any]() reflect.Type {
	return reflect.TypeOf((*T)(nil)).Elem()
}

// opaque types take a value of their own shape ("all", a count or a list of devices), read by
// their own UnmarshalJSON: their insides are not keys.
var opaque = map[reflect.Type]bool{
	reflectType[dpv1.ReplicatedDevices](): true,
}

// fields maps the JSON names of a struct's fields (embedded structs flattened, as
// encoding/json does) to their types.
func fields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			for k, v := range fields(ft) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// walk records, under `path`, every key of the decoded YAML `v` that type `t` has no field for.
// A value of the wrong shape is left to the parser, which reports it.
func walk(v any, t reflect.Type, path string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if opaque[t] {
		return
	}
	switch val := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			known := fields(t)
			keys := make([]string, 0, len(val))
			for k := range val {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				ft, ok := known[k]
				if !ok {
					*out = append(*out, joinPath(path, k))
					continue
				}
				walk(val[k], ft, joinPath(path, k), out)
			}
		case reflect.Map:
			for k, x := range val {
				walk(x, t.Elem(), joinPath(path, k), out)
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, x := range val {
				walk(x, t.Elem(), path+"["+itoa(i)+"]", out)
			}
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
