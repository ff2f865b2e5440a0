package storage

import (
	"context"
	"encoding/json"
	"time"
)

// TakeLease writes b's lease as another run's, named owner, as a run that
// took it over after it expired would: for tests of fencing.
func TakeLease(b *Blob, owner string) error {
	data, err := json.Marshal(leaseRecord{Owner: owner, Token: "taken by a test", Expires: time.Now().Add(time.Hour)})
	if err != nil {
		return err
	}
	return b.bucket.WriteAll(context.Background(), leaseKey, data, nil)
}
