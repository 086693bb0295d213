package sqlite

import "testing"

// Each schedule migration has its description for a dry run, in version order.
func TestScheduleMigrationSteps_DescribeEveryMigration(t *testing.T) {
	if len(scheduleMigrationSteps) != len(scheduleMigrations) {
		t.Fatalf("%d steps described, %d migrations", len(scheduleMigrationSteps), len(scheduleMigrations))
	}
	for i, m := range scheduleMigrationSteps {
		if m.Version != i+1 || m.Name == "" || m.SQL == "" {
			t.Fatalf("step %d: %+v", i, m)
		}
	}
}
