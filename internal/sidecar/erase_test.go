package sidecar

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/oplog"
)

func TestAPI_DeleteAgentErasesItFromEveryLayerBehindTheToken(t *testing.T) {
	s, srv, _ := testSidecar(t, func(c *config.Config) { c.HTTP.Token = "s3cret" })
	// A name with a '/' and non-ASCII, percent-encoded in the path.
	victim, kept := strand(t, s, "cart/ü-1", 7), strand(t, s, "cart/2", 4)
	if _, err := s.stack.Drain(t.Context(), victim, oplog.Ephemeral); err != nil {
		t.Fatal(err)
	}
	path := "/v1/agents/" + url.PathEscape(victim.Key())
	for _, tok := range []string{"", "wrong"} {
		if code, _ := call(t, srv, "DELETE", path, tok, nil); code != http.StatusUnauthorized {
			t.Fatalf("DELETE with token %q: %d, want 401", tok, code)
		}
	}
	readBack(t, s, victim, 7)                                                               // an unauthorized DELETE erased nothing
	tooLong := "/v1/agents/" + url.PathEscape("shop:"+strings.Repeat("ü", oplog.MaxKeyLen)) // past the longest key
	for _, bad := range []string{"/v1/agents/no-colon", path + "?mode=x", path + "?force=1", tooLong, "/v1/agents/" + url.PathEscape("shop:\xff\xfe")} {
		if code, out := call(t, srv, "DELETE", bad, "s3cret", nil); code != http.StatusBadRequest || out["error"] == nil {
			t.Fatalf("DELETE %s: %d %v, want 400 with an error", bad, code, out)
		}
	}
	code, out := call(t, srv, "DELETE", path, "s3cret", nil)
	if code != http.StatusOK || out["agent"] != victim.Key() || out["mode"] != "ephemeral" || out["entries"] != float64(7) {
		t.Fatalf("DELETE %s: %d %v", path, code, out)
	}
	for _, l := range s.stack.Layers() {
		if _, ok, err := l.LastIndex(t.Context(), victim, oplog.Ephemeral); ok || err != nil {
			t.Fatalf("%s still in %s after DELETE (%v)", victim, l.Name(), err)
		}
	}
	readBack(t, s, victim, 0)
	readBack(t, s, kept, 4)
	if code, out := call(t, srv, "DELETE", path, "s3cret", nil); code != http.StatusOK || out["entries"] != float64(0) {
		t.Fatalf("a second DELETE: %d %v, want 200 and 0 entries", code, out)
	}
}
