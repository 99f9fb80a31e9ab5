// Command kfake runs franz-go's in-process Kafka cluster (kfake) on
// loopback until it is interrupted, for load runs of DISPATCH_QUEUE=kafka
// on a machine without a Kafka server:
//
//	go run ./loadtest/cmd/kfake &
//	go run ./loadtest/cmd/dispatch-load --workload W3 --queue kafka --kafka-brokers 127.0.0.1:9092
//
// It keeps everything in memory and writes nothing to disk: its figures
// are Dispatch's on a Kafka protocol, not those of a Kafka cluster.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 9092, "port of the first broker on 127.0.0.1; the others follow it")
	brokers := flag.Int("brokers", 1, "brokers in the cluster")
	flag.Parse()
	if *brokers < 1 || *port < 1 || *port+*brokers > 65536 {
		fmt.Fprintf(os.Stderr, "kfake: --brokers must be at least 1 and --port leave room for them, got %d from %d\n", *brokers, *port)
		os.Exit(2)
	}
	ports := make([]int, *brokers)
	for i := range ports {
		ports[i] = *port + i
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(*brokers), kfake.Ports(ports...))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake: %v\n", err)
		os.Exit(1)
	}
	defer c.Close()
	fmt.Printf("kfake: KAFKA_BROKERS=%s\n", strings.Join(c.ListenAddrs(), ","))
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
