package memory_test

import (
	"testing"

	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog/schedule"
	"github.com/stratalog/strata/oplog/schedule/scheduletest"
)

func TestScheduleStoreConformance(t *testing.T) {
	scheduletest.Run(t, func(testing.TB) schedule.Store { return memory.NewScheduleStore() })
}
