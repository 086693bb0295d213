package memory_test

import (
	"testing"

	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/oplog/schedule/scheduletest"
)

func TestScheduleStoreConformance(t *testing.T) {
	scheduletest.Run(t, scheduletest.Harness{New: func(testing.TB) schedule.Store { return memory.NewScheduleStore() }})
}
