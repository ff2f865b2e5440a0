package heap

// Another backend may take over restored heap state: the Pebble backend
// restores a heap checkpoint's keyed state into the heap backend it keeps
// its timers in, and moves each state into its database when a table
// declares it. It registers a table of the name here (which decodes the
// state with the table's codecs), reads its entries with Each and
// releases it.

// Restored reports whether restored state name waits for a table to
// declare it.
func (b *Backend) Restored(name string) bool {
	_, ok := b.pending[name]
	return ok
}

// Release unregisters table name: its state is no longer this backend's,
// and snapshots leave it out. Name may be declared again.
func (b *Backend) Release(name string) {
	t, ok := b.byName[name]
	if !ok {
		return
	}
	delete(b.byName, name)
	for i, u := range b.tables {
		if u == t {
			b.tables = append(b.tables[:i], b.tables[i+1:]...)
			break
		}
	}
}

// Each calls f with every key's value and its key group (absolute), until
// f returns an error, which it returns.
func (t *Value[K, V]) Each(f func(group int, k K, v V) error) error {
	for i, m := range t.groups {
		for k, e := range m {
			if err := f(t.b.groups.First+i, k, e.v); err != nil {
				return err
			}
		}
	}
	return nil
}

// Each calls f with every key's list, which f must not modify, and its key
// group (absolute), until f returns an error, which it returns.
func (t *List[K, V]) Each(f func(group int, k K, vs []V) error) error {
	for i, m := range t.groups {
		for k, e := range m {
			if err := f(t.b.groups.First+i, k, e.vs); err != nil {
				return err
			}
		}
	}
	return nil
}

// Each calls f with every entry of every key's map and the key's key group
// (absolute), until f returns an error, which it returns.
func (t *Map[K, UK, V]) Each(f func(group int, k K, uk UK, v V) error) error {
	for i, m := range t.groups {
		for k, in := range m {
			for uk, e := range in.m {
				if err := f(t.b.groups.First+i, k, uk, e.v); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
