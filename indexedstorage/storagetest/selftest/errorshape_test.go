package selftest

import (
	"context"

	is "github.com/stratalog/strata/indexedstorage"
)

// bugBareErrors returns the reference store's errors as they are made, without the is.OpError that
// names backend, operation and index: what a backend that words its errors by hand does.
const bugBareErrors bug = "bareErrors"

func init() {
	mutants = append(mutants, mutant{bugBareErrors,
		"errors are bare sentinels and text, not an is.OpError naming backend, operation and index"})
}

// shapeErrors gives st the one error shape of a real backend, is.OpError, made in one place (fail);
// the bareErrors mutant keeps st's errors bare.
func shapeErrors(st *store, b bug) is.Storage {
	if b == bugBareErrors {
		return st
	}
	return shaped{st}
}

// storeOf is the reference store under what harness's New returned.
func storeOf(st is.Storage) *store {
	if p, ok := st.(perKey); ok {
		st = p.Storage
	}
	if s, ok := st.(shaped); ok {
		return s.store
	}
	return st.(*store)
}

// shaped is the reference store with every error shaped by fail.
type shaped struct{ *store }

var (
	_ is.Storage           = shaped{}
	_ is.ClosestLastReader = shaped{}
)

func fail(op is.Operation, ns, key string, err error) error {
	return is.NewOpError("reference", op, ns, key, err)
}

func (s shaped) Exists(ctx context.Context, ns, key string) (bool, error) {
	ok, err := s.store.Exists(ctx, ns, key)
	return ok, fail(is.OpExists, ns, key, err)
}

func (s shaped) Append(ctx context.Context, ns, key string, id uint64, value []byte) error {
	return fail(is.OpAppend, ns, key, s.store.Append(ctx, ns, key, id, value))
}

func (s shaped) AppendMany(ctx context.Context, ns, key string, entries []is.Entry) error {
	return fail(is.OpAppendMany, ns, key, s.store.AppendMany(ctx, ns, key, entries))
}

func (s shaped) Length(ctx context.Context, ns, key string) (uint64, error) {
	n, err := s.store.Length(ctx, ns, key)
	return n, fail(is.OpLength, ns, key, err)
}

func (s shaped) Read(ctx context.Context, ns, key string, from, to uint64) ([]is.Entry, error) {
	entries, err := s.store.Read(ctx, ns, key, from, to)
	return entries, fail(is.OpRead, ns, key, err)
}

func (s shaped) First(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	e, ok, err := s.store.First(ctx, ns, key)
	return e, ok, fail(is.OpFirst, ns, key, err)
}

func (s shaped) Last(ctx context.Context, ns, key string) (is.Entry, bool, error) {
	e, ok, err := s.store.Last(ctx, ns, key)
	return e, ok, fail(is.OpLast, ns, key, err)
}

func (s shaped) LastID(ctx context.Context, ns, key string) (uint64, bool, error) {
	id, ok, err := s.store.LastID(ctx, ns, key)
	return id, ok, fail(is.OpLastID, ns, key, err)
}

func (s shaped) Closest(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, error) {
	e, ok, err := s.store.Closest(ctx, ns, key, id)
	return e, ok, fail(is.OpClosest, ns, key, err)
}

func (s shaped) ClosestLast(ctx context.Context, ns, key string, id uint64) (is.Entry, bool, uint64, bool, error) {
	e, found, last, exists, err := s.store.ClosestLast(ctx, ns, key, id)
	return e, found, last, exists, fail(is.OpClosestLast, ns, key, err)
}

func (s shaped) DropPrefix(ctx context.Context, ns, key string, upTo uint64) (uint64, error) {
	n, err := s.store.DropPrefix(ctx, ns, key, upTo)
	return n, fail(is.OpDropPrefix, ns, key, err)
}

func (s shaped) Delete(ctx context.Context, ns, key string) error {
	return fail(is.OpDelete, ns, key, s.store.Delete(ctx, ns, key))
}

func (s shaped) Scan(ctx context.Context, ns, prefix string, cursor uint64, count int) (uint64, []string, error) {
	next, keys, err := s.store.Scan(ctx, ns, prefix, cursor, count)
	return next, keys, fail(is.OpScan, ns, "", err)
}

func (s shaped) ScanStable(ctx context.Context, ns string, r is.KeyRange, from is.Resume, count int) (is.Page, error) {
	page, err := s.store.ScanStable(ctx, ns, r, from, count)
	return page, fail(is.OpScanStable, ns, "", err)
}

var (
	_ is.BatchReader   = shaped{}
	_ is.BatchDropper  = shaped{}
	_ is.BatchAppender = shaped{}
)

func (s shaped) AppendKeys(ctx context.Context, ns string, reqs []is.KeyEntries) ([]error, error) {
	res, err := s.store.AppendKeys(ctx, ns, reqs)
	for i := range res {
		res[i] = fail(is.OpAppendKeys, ns, reqs[i].Key, res[i])
	}
	return res, fail(is.OpAppendKeys, ns, "", err)
}

func (s shaped) ClosestLastMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.ClosestLastResult, error) {
	res, err := s.store.ClosestLastMany(ctx, ns, reqs)
	for i := range res {
		res[i].Err = fail(is.OpClosestLastMany, ns, reqs[i].Key, res[i].Err)
	}
	return res, fail(is.OpClosestLastMany, ns, "", err)
}

func (s shaped) DropPrefixMany(ctx context.Context, ns string, reqs []is.KeyID) ([]is.DropResult, error) {
	res, err := s.store.DropPrefixMany(ctx, ns, reqs)
	for i := range res {
		res[i].Err = fail(is.OpDropPrefixMany, ns, reqs[i].Key, res[i].Err)
	}
	return res, fail(is.OpDropPrefixMany, ns, "", err)
}
