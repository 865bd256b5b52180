package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"

	"rekey.io/rekey/pkg/apis/attestation/fuzzer"
)

// TestRoundTripTypes fuzzes every type through internal -> v1alpha1 ->
// JSON/YAML -> v1alpha1 -> internal and requires nothing to be lost.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, fuzzer.Funcs)
}

// TestRoundTripProtobuf does the same through protobuf, the wire and
// storage encoding the server and the generated clients prefer.
func TestRoundTripProtobuf(t *testing.T) {
	roundtrip.RoundTripProtobufTestForAPIGroup(t, Install, fuzzer.Funcs)
}
