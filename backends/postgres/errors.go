package postgres

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	is "github.com/stratalog/strata/indexedstorage"
)

// classify translates a native error into the indexedstorage sentinels. It is the only place that
// knows Postgres error codes. An error it does not recognise is returned as it is: permanent, and
// neither a conflict nor the caller's fault.
func classify(err error) error {
	if classified, ok := is.ClassifyCommon(err); ok {
		return classified
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case strings.HasPrefix(code, "08"), // connection exception
			code == "40001", // serialization_failure
			code == "40P01", // deadlock_detected
			code == "55P03", // lock_not_available (lock_timeout)
			code == "57014", // query_canceled (statement_timeout; a caller's cancellation is caught above)
			code == "57P01", // admin_shutdown
			code == "57P02", // crash_shutdown
			code == "57P03", // cannot_connect_now (starting up, recovering)
			code == "53300": // too_many_connections
			return is.Classify(is.ErrTransient, err)
		case code == "23505": // unique_violation: an id the index already holds
			return is.Classify(is.ErrConflict, err)
		case strings.HasPrefix(code, "22"): // data exception: a value the column cannot hold
			return is.Classify(is.ErrInvalidArgument, err)
		}
		return err
	}
	// A timeout inside pgconn, and a failure pgconn knows happened before the request reached the
	// server (so repeating it cannot apply anything twice), are worth retrying.
	if pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
		return is.Classify(is.ErrTransient, err)
	}
	return err
}
