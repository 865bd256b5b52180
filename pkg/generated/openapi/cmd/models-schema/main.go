// Command models-schema prints the OpenAPI v2 definitions of rekey's types as
// one Swagger document. hack/update-codegen.sh feeds it to applyconfiguration-gen
// so that generated apply configurations know each type's merge keys.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"rekey.io/rekey/pkg/generated/openapi"
)

func main() {
	if err := writeSchema(); err != nil {
		fmt.Fprintf(os.Stderr, "models-schema: %v\n", err)
		os.Exit(1)
	}
}

func writeSchema() error {
	ref := func(name string) spec.Ref { return spec.MustCreateRef("#/definitions/" + name) }
	defs := openapi.GetOpenAPIDefinitions(ref)
	schemas := make(map[string]spec.Schema, len(defs))
	for name, def := range defs {
		// Some definitions carry a v3 schema with the v2 one embedded as an
		// extension; applyconfiguration-gen reads v2.
		if embedded, ok := def.Schema.Extensions[common.ExtensionV2Schema]; ok {
			if v2, ok := embedded.(spec.Schema); ok {
				schemas[name] = v2
				continue
			}
		}
		schemas[name] = def.Schema
	}
	doc := spec.Swagger{SwaggerProps: spec.SwaggerProps{
		Swagger:     "2.0",
		Definitions: schemas,
		Info:        &spec.Info{InfoProps: spec.InfoProps{Title: "rekey", Version: "unversioned"}},
	}}
	out, err := json.Marshal(&doc)
	if err != nil {
		return fmt.Errorf("encoding definitions: %w", err)
	}
	_, err = os.Stdout.Write(out)
	return err
}
