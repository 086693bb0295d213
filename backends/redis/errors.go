package redis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	is "github.com/stratalog/strata/indexedstorage"
)

// conflictCode starts the error reply appendScript sends when a batch is not above the index's last
// id. It is one word, like Redis's own error codes, so classify can match it exactly.
const conflictCode = "STRATACONFLICT"

// classify translates a native error into the indexedstorage sentinels. It is the only place that
// does: callers add context around what it returns. goredis.Nil never reaches it (no command used
// here returns Nil for "not found"); an error it cannot place (WRONGTYPE from a foreign key, OOM, a
// script error) is returned unclassified: permanent, not retried.
func classify(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, goredis.ErrClosed):
		return is.Classify(is.ErrClosed, err)
	case errors.Is(err, goredis.ErrPoolTimeout):
		return is.Classify(is.ErrTransient, err)
	}
	var reply goredis.Error
	if errors.As(err, &reply) {
		code, rest, _ := strings.Cut(reply.Error(), " ")
		switch code {
		case "LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "MOVED", "ASK", "READONLY", "NOREPLICAS":
			// Starting up, running a long script, resharding (a slot moving, a redirect go-redis did
			// not follow to the end), failing over (a master turned replica): a retry may succeed.
			return is.Classify(is.ErrTransient, err)
		case conflictCode:
			return conflict(rest)
		}
	}
	if classified, ok := is.ClassifyCommon(err); ok {
		return classified
	}
	return err
}

// conflictLast reads the index's last id out of the script's conflict reply, for Append to say which
// id was refused; ok is false for any other error.
func conflictLast(err error) (last uint64, ok bool) {
	var reply goredis.Error
	if !errors.As(err, &reply) {
		return 0, false
	}
	code, rest, _ := strings.Cut(reply.Error(), " ")
	if code != conflictCode {
		return 0, false
	}
	last, perr := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
	return last, perr == nil
}

// conflict reads the index's last id out of the script's conflict reply.
func conflict(lastHex string) error {
	last, err := strconv.ParseUint(strings.TrimSpace(lastHex), 16, 64)
	if err != nil {
		return fmt.Errorf("%w: an id is not above the index's last id", is.ErrConflict)
	}
	return fmt.Errorf("%w: an id is not above the index's last id %d", is.ErrConflict, last)
}
