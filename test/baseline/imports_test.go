package baseline

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNothingOfStrata: the baselines measure strata's storage layer, so they must not run on
// it: no package of this module (indexedstorage, a backend, archive, an internal engine) is among
// this package's dependencies, direct or not.
func TestImportsNothingOfStrata(t *testing.T) {
	const self = "github.com/stratalog/strata/test/baseline"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", self).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	for _, dep := range deps {
		if dep != self && (dep == "github.com/stratalog/strata" || strings.HasPrefix(dep, "github.com/stratalog/strata/")) {
			t.Errorf("%s depends on %s: a baseline talks to the engine through its own client only", self, dep)
		}
	}
}
