package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
)

func newKafka() *cobra.Command {
	kafka := &cobra.Command{Use: "kafka", Short: "Kafka tools for development"}
	var listen string
	var partitions int32
	var topics []string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Start a development Kafka broker: franz-go's kfake, in memory, on a loopback port (not for production)",
		Long: `Start a development Kafka broker: franz-go's kfake, in memory, on a loopback port.
It speaks the Kafka protocol, transactions included, and loses everything when it
stops. It is for trying Weir and for tests, not for production.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, portStr, err := net.SplitHostPort(listen)
			if err != nil {
				return fmt.Errorf("--listen %q: want host:port: %w", listen, err)
			}
			port, err := strconv.Atoi(portStr)
			if err != nil || port < 0 || port > 65535 {
				return fmt.Errorf("--listen %q: bad port", listen)
			}
			if partitions < 1 {
				return fmt.Errorf("--partitions %d: must be at least 1", partitions)
			}
			// Topics are created when first produced to, as by a broker
			// with Kafka's default auto.create.topics.enable.
			opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), kfake.DefaultNumPartitions(int(partitions)), kfake.AllowAutoTopicCreation(),
				kfake.ListenFn(func(network, _ string) (net.Listener, error) {
					return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
				})}
			if len(topics) > 0 {
				opts = append(opts, kfake.SeedTopics(partitions, topics...))
			}
			cluster, err := kfake.NewCluster(opts...)
			if err != nil {
				return fmt.Errorf("start the development broker on %s: %w", listen, err)
			}
			defer cluster.Close()
			addr := cluster.ListenAddrs()[0]
			slog.Warn("development Kafka broker (kfake, in memory): not for production; everything is lost when it stops", "addr", addr)
			fmt.Fprintf(os.Stdout, "weir: development Kafka broker listening on %s (Ctrl-C stops it)\n", addr)
			<-cmd.Context().Done()
			return nil
		},
	}
	serve.Flags().StringVar(&listen, "listen", "127.0.0.1:9092", "address to listen on (port 0: any free port)")
	serve.Flags().Int32Var(&partitions, "partitions", 3, "partitions of the topics it creates")
	serve.Flags().StringSliceVar(&topics, "topic", nil, "topics to create at start (others are created when a client first produces to one, or asks to create it)")
	kafka.AddCommand(serve)
	return kafka
}
