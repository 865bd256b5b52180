package framework

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testPeers is three plain HTTP servers, each behind its proxy, standing
// in for three etcd members with the IDs 0xa0, 0xa1, 0xa2.
type testPeers struct {
	net     *peerNetwork
	proxies []*peerProxy
}

func memberID(i int) string { return fmt.Sprintf("a%d", i) }

func startTestPeers(t *testing.T, knownIDs bool) *testPeers {
	t.Helper()
	tp := &testPeers{net: newPeerNetwork()}
	t.Cleanup(tp.net.close)
	for i := 0; i < 3; i++ {
		mux := http.NewServeMux()
		// /echo answers with the member's index and the request body, so
		// that a test sees the replayed bytes arrive whole.
		mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			_, _ = fmt.Fprintf(w, "%d:%s", i, body)
		})
		// /stream is a long-lived response, as etcd's raft streams are.
		mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
			for {
				if _, err := fmt.Fprintln(w, "tick"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		p, err := tp.net.listen(i)
		if err != nil {
			t.Fatal(err)
		}
		p.serve(strings.TrimPrefix(srv.URL, "http://"))
		tp.proxies = append(tp.proxies, p)
	}
	if knownIDs {
		tp.net.setIDs(map[uint64]int{0xa0: 0, 0xa1: 1, 0xa2: 2})
	}
	return tp
}

// send posts body to member to's /echo as member from (-1: without
// X-Server-From) on a connection of its own.
func (tp *testPeers) send(from, to int, body string) (string, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+tp.proxies[to].addr()+"/echo", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	if from >= 0 {
		req.Header.Set("X-Server-From", memberID(from))
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := (&http.Client{Transport: tr}).Do(req.WithContext(ctx))
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(resp.Body)
	return string(got), err
}

func (tp *testPeers) mustPass(t *testing.T, from, to int) {
	t.Helper()
	// A body larger than what bufio reads ahead with the header, so that
	// both the replayed bytes and the spliced rest must arrive.
	body := strings.Repeat("x", 100<<10)
	got, err := tp.send(from, to, body)
	if err != nil {
		t.Fatalf("%d -> %d: %v", from, to, err)
	}
	if want := fmt.Sprintf("%d:%s", to, body); got != want {
		t.Fatalf("%d -> %d: got %d bytes starting %.20q, want %d", from, to, len(got), got, len(want))
	}
}

func (tp *testPeers) mustFail(t *testing.T, from, to int) {
	t.Helper()
	if got, err := tp.send(from, to, "hello"); err == nil {
		t.Fatalf("%d -> %d passed (%q), want it cut", from, to, got)
	}
}

// openStream starts a long-lived response from member to as member from
// and returns its reader once the first line has arrived.
func (tp *testPeers) openStream(t *testing.T, from, to int) *bufio.Reader {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+tp.proxies[to].addr()+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Server-From", memberID(from))
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("stream %d -> %d: %v", from, to, err)
	}
	return r
}

// streamEnds waits until the stream's reader fails.
func streamEnds(t *testing.T, r *bufio.Reader, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := r.ReadString('\n'); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		_ = err // closed, which is all this waits for
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still open 5s after the partition", what)
	}
}

func TestPeerProxyPartition(t *testing.T) {
	tp := startTestPeers(t, true)
	for from := -1; from < 3; from++ {
		for to := 0; to < 3; to++ {
			if from != to {
				tp.mustPass(t, from, to)
			}
		}
	}
	fromPartitioned := tp.openStream(t, 0, 1)
	toPartitioned := tp.openStream(t, 2, 0)
	between := tp.openStream(t, 1, 2)

	tp.net.partition(0)
	streamEnds(t, fromPartitioned, "stream 0 -> 1")
	streamEnds(t, toPartitioned, "stream 2 -> 0")
	tp.mustFail(t, 0, 1)
	tp.mustFail(t, 0, 2)
	tp.mustFail(t, 1, 0)
	tp.mustFail(t, 2, 0)
	// An unknown sender is cut only on its way to the partitioned member.
	tp.mustFail(t, -1, 0)
	tp.mustPass(t, -1, 1)
	// The others still talk, on open connections and new ones.
	tp.mustPass(t, 1, 2)
	tp.mustPass(t, 2, 1)
	if _, err := between.ReadString('\n'); err != nil {
		t.Fatalf("stream 1 -> 2 was cut by member 0's partition: %v", err)
	}

	tp.net.heal(0)
	tp.mustPass(t, 0, 1)
	tp.mustPass(t, 2, 0)
	tp.mustPass(t, -1, 0)
}

// A connection opened before the proxies knew the member IDs (etcd opens
// its streams while the cluster starts) is still cut when its sender is
// partitioned afterwards.
func TestPeerProxyIDsLearnedAfterConnect(t *testing.T) {
	tp := startTestPeers(t, false)
	early := tp.openStream(t, 0, 1)
	tp.net.setIDs(map[uint64]int{0xa0: 0, 0xa1: 1, 0xa2: 2})
	tp.net.partition(0)
	streamEnds(t, early, "stream 0 -> 1 opened before the IDs were known")
	tp.mustFail(t, 0, 2)
}

// A connection whose header never ends within the limit is closed without
// reaching the member.
func TestPeerProxyBoundsTheHeader(t *testing.T) {
	tp := startTestPeers(t, true)
	c, err := net.Dial("tcp", tp.proxies[1].addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, _ = fmt.Fprintf(c, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Long: %s\r\n", strings.Repeat("y", peerHeaderLimit))
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// The proxy closes it, with unread bytes: EOF or a reset.
	got, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the proxy kept the connection open: %v", err)
	}
	if len(got) != 0 {
		t.Fatalf("the member answered an over-long header: %q", got)
	}
}
