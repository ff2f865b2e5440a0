// Package clusterpb holds the control plane's messages and Connect stubs,
// generated from cluster.proto (protoc 3.21, protoc-gen-go v1.36.12,
// protoc-gen-connect-go v1.21.1):
//
//	protoc --go_out=. --go_opt=paths=source_relative \
//	  --connect-go_out=. --connect-go_opt=paths=source_relative cluster.proto
package clusterpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative cluster.proto
