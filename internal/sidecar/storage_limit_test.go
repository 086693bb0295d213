package sidecar

import (
	"net/http"
	"testing"

	"github.com/stratalog/strata/config"
	"github.com/stratalog/strata/internal/testenv"
)

// On PostgreSQL, whose Store keeps max_concurrent_ops inside, the sidecar opens the storage for the
// sweep's max_concurrency (a default limit below it would queue the sweep on its own slots) and
// /v1/status reports the limit; a max_concurrent_ops the URL sets stands.
func TestStatus_ReportsThePostgresLimitRaisedToTheSweeps(t *testing.T) {
	pgURL := testenv.PostgresURL(t)
	base := testenv.WithQuery(t, pgURL, "schema", testenv.PostgresSchema(t, pgURL))
	for _, c := range []struct {
		name string
		url  string
		want float64
	}{
		{"default", base, 40},
		{"explicit", testenv.WithQuery(t, base, "max_concurrent_ops", "3"), 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, srv, _ := testSidecar(t, func(cfg *config.Config) {
				cfg.Storage.URL = c.url
				cfg.Sweep.MaxConcurrency = 40
			})
			code, body := call(t, srv, http.MethodGet, "/v1/status", "", nil)
			storage, _ := body["storage"].(map[string]any)
			if code != http.StatusOK || storage["max_concurrent_ops"] != c.want {
				t.Fatalf("GET /v1/status: %d, storage %v; want max_concurrent_ops %v", code, storage, c.want)
			}
		})
	}
}
