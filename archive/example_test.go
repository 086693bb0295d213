package archive_test

import (
	"context"
	"fmt"

	"github.com/stratalog/strata/archive"
	"github.com/stratalog/strata/backends/memory"
	"github.com/stratalog/strata/oplog"
)

// An executor tearing down many ephemeral agents at once drains them in one batch: one read of the
// first archive layer for all of them, their blob puts, one drop. Each agent gets its own result.
func ExampleDefaultStack_drainMany() {
	ctx := context.Background()
	stack, err := archive.DefaultStack(memory.New(), memory.NewBlobStore(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	var agents []oplog.AgentID
	for i := range 3 {
		a := oplog.AgentID{Component: "shop", Name: fmt.Sprintf("cart-%d", i)}
		agents = append(agents, a)
		if err := stack.Append(ctx, a, oplog.Ephemeral, []oplog.Entry{{Index: 1, Payload: []byte("add item")}}); err != nil {
			fmt.Println(err)
			return
		}
	}
	results, err := stack.DrainMany(ctx, oplog.Ephemeral, agents)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, r := range results {
		fmt.Printf("%s: moved %d, err %v\n", agents[i].Name, r.Moved, r.Err)
	}
	// Output:
	// cart-0: moved 1, err <nil>
	// cart-1: moved 1, err <nil>
	// cart-2: moved 1, err <nil>
}
