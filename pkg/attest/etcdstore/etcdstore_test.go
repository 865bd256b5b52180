package etcdstore

import (
	"testing"

	"rekey.io/rekey/pkg/attest"
	"rekey.io/rekey/pkg/attest/storetest"
	"rekey.io/rekey/test/etcdtest"
)

func TestStore(t *testing.T) {
	client := etcdtest.Start(t)
	n := 0
	storetest.Run(t, func(*testing.T) attest.Store {
		n++ // a prefix per subtest: each starts empty
		return New(client, "/rekey.io-private/test-"+string(rune('a'+n)))
	})
}
