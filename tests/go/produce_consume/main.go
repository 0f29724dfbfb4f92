// End-to-end check of the pulsar-grpc broker from Go, with grpc-go and code generated from
// protos/pulsargrpc/v1/pulsar.proto by protoc-gen-go and protoc-gen-go-grpc (no SDK).
// Usage: produce_consume <host:port> <topic>
//
// It subscribes a Shared consumer (initial position Earliest) and grants permits with Flow;
// produces 100 messages ("msg-0" .. "msg-99") as 10 batches of 10 and checks the receipts;
// consumes them (each exactly once, ids matching the receipts), acks them with request_id 1
// and waits for the AckReceipt (acks durable), then half-closes the call and waits for the
// broker to end it. It subscribes again, produces one more message and checks that it is
// the first delivered: an unacked message would have come back before it. Then it asks for
// the last message id of a topic that does not exist and reads the error's
// google.rpc.ErrorInfo from the status details, and sends a misspelt call parameter and
// checks that it is refused with INVALID_ARGUMENT.
//
// Prints one JSON summary line on stdout and exits 0; on failure prints the error on stderr
// and exits 1. Every call has a deadline.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "pulsargrpc/v1"
)

const (
	batches      = 10
	batchSize    = 10
	total        = batches * batchSize
	ackRequestID = 1
	callTimeout  = 45 * time.Second
)

type summary struct {
	Produced     int               `json:"produced"`
	Consumed     int               `json:"consumed"`
	Redelivered  int               `json:"redelivered"`
	ErrorReason  string            `json:"error_reason"`
	ErrorDomain  string            `json:"error_domain"`
	ErrorMeta    map[string]string `json:"error_metadata"`
	TypoRefusal  string            `json:"typo_refusal"`
	ReceiptCount int               `json:"receipts"`
}

func main() {
	if len(os.Args) != 3 {
		fail(fmt.Errorf("usage: produce_consume <host:port> <topic>"))
	}
	address, topic := os.Args[1], os.Args[2]
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	conn, err := grpc.DialContext(ctx, address, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		fail(fmt.Errorf("dial %s: %w", address, err))
	}
	defer conn.Close()
	client := pb.NewPulsarServiceClient(conn)
	var out summary
	if err := run(ctx, client, topic, &out); err != nil {
		fail(err)
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "produce_consume: FAILED: %v\n", err)
	os.Exit(1)
}

func run(ctx context.Context, client pb.PulsarServiceClient, topic string, out *summary) error {
	consumer, err := subscribe(ctx, client, topic)
	if err != nil {
		return err
	}
	receipts, err := produce(ctx, client, topic, 0, batches, batchSize)
	if err != nil {
		return err
	}
	out.Produced, out.ReceiptCount = total, len(receipts)
	ids, err := consume(consumer, receipts, total)
	if err != nil {
		return err
	}
	out.Consumed = len(ids)
	if err := ackAll(consumer, ids); err != nil {
		return err
	}
	if err := closeConsumer(consumer); err != nil {
		return err
	}
	if out.Redelivered, err = redelivered(ctx, client, topic); err != nil {
		return err
	}
	if err := readErrorInfo(ctx, client, out); err != nil {
		return err
	}
	return refuseTypo(ctx, client, topic, out)
}

func subscribe(ctx context.Context, client pb.PulsarServiceClient, topic string) (pb.PulsarService_ConsumeClient, error) {
	md := metadata.Pairs(
		"x-pulsar-topic", topic,
		"x-pulsar-subscription", "go-sub",
		"x-pulsar-subscription-type", "Shared",
		"x-pulsar-initial-position", "Earliest",
	)
	consumer, err := client.Consume(metadata.NewOutgoingContext(ctx, md))
	if err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	first, err := consumer.Recv()
	if err != nil {
		return nil, fmt.Errorf("consume: first response: %w", err)
	}
	if first.GetSubscribed() == nil {
		return nil, fmt.Errorf("consume: expected ConsumerSubscribed, got %v", first)
	}
	flow := &pb.ConsumeRequest{Request: &pb.ConsumeRequest_Flow{Flow: &pb.Flow{Permits: 1000}}}
	if err := consumer.Send(flow); err != nil {
		return nil, fmt.Errorf("flow: %w", err)
	}
	return consumer, nil
}

// produce sends count batches of size messages, numbered from first, and returns the
// receipts in order.
func produce(ctx context.Context, client pb.PulsarServiceClient, topic string, first, count, size int) ([]*pb.SendReceipt, error) {
	producer, err := client.Produce(metadata.NewOutgoingContext(ctx, metadata.Pairs("x-pulsar-topic", topic)))
	if err != nil {
		return nil, fmt.Errorf("produce: %w", err)
	}
	ready, err := producer.Recv()
	if err != nil || ready.GetReady() == nil {
		return nil, fmt.Errorf("produce: expected ProducerReady, got %v (%v)", ready, err)
	}
	sequence := uint64(ready.GetReady().GetLastSequenceId() + 1)
	var receipts []*pb.SendReceipt
	for b := 0; b < count; b++ {
		request := &pb.ProduceRequest{SequenceId: sequence}
		for i := 0; i < size; i++ {
			payload := fmt.Sprintf("msg-%d", first+b*size+i)
			request.Messages = append(request.Messages, &pb.MessageData{Payload: []byte(payload)})
		}
		if err := producer.Send(request); err != nil {
			return nil, fmt.Errorf("produce: send: %w", err)
		}
		sequence += uint64(size)
	}
	for b := 0; b < count; b++ {
		response, err := producer.Recv()
		if err != nil {
			return nil, fmt.Errorf("produce: receipt %d: %w", b, err)
		}
		receipt := response.GetReceipt()
		if receipt == nil || receipt.GetBatchSize() != uint32(size) || receipt.GetDuplicate() {
			return nil, fmt.Errorf("produce: unexpected receipt %v", response)
		}
		receipts = append(receipts, receipt)
	}
	if err := producer.CloseSend(); err != nil {
		return nil, err
	}
	if _, err := producer.Recv(); err != io.EOF {
		return nil, fmt.Errorf("produce: expected the call to end cleanly, got %v", err)
	}
	return receipts, nil
}

// consume reads want messages and checks each arrives once, under the id its receipt gave.
func consume(consumer pb.PulsarService_ConsumeClient, receipts []*pb.SendReceipt, want int) ([]*pb.MessageId, error) {
	expected := map[string]string{} // payload -> "ledger:entry:index"
	for b, receipt := range receipts {
		for i := 0; i < int(receipt.GetBatchSize()); i++ {
			expected[fmt.Sprintf("msg-%d", b*batchSize+i)] = fmt.Sprintf("%d:%d:%d", receipt.GetLedgerId(), receipt.GetEntryId(), i)
		}
	}
	var ids []*pb.MessageId
	for len(ids) < want {
		response, err := consumer.Recv()
		if err != nil {
			return nil, fmt.Errorf("consume: after %d messages: %w", len(ids), err)
		}
		batch := response.GetMessages()
		if batch == nil {
			continue // e.g. an ActiveConsumerChange: not for a Shared subscription, but allowed
		}
		for _, entry := range batch.GetEntries() {
			for i, message := range entry.GetMessages() {
				payload := string(message.GetPayload())
				id := fmt.Sprintf("%d:%d:%d", entry.GetLedgerId(), entry.GetEntryId(), i)
				if expected[payload] != id {
					return nil, fmt.Errorf("consume: %q arrived as %s, expected %q (duplicate or unknown)", payload, id, expected[payload])
				}
				delete(expected, payload)
				ids = append(ids, &pb.MessageId{LedgerId: entry.GetLedgerId(), EntryId: entry.GetEntryId(), BatchIndex: int32(i), Partition: entry.GetPartition()})
			}
		}
	}
	return ids, nil
}

func ackAll(consumer pb.PulsarService_ConsumeClient, ids []*pb.MessageId) error {
	ack := &pb.Ack{Type: pb.AckType_Individual, Ids: ids, RequestId: ackRequestID}
	if err := consumer.Send(&pb.ConsumeRequest{Request: &pb.ConsumeRequest_Ack{Ack: ack}}); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	for {
		response, err := consumer.Recv()
		if err != nil {
			return fmt.Errorf("ack: waiting for the receipt: %w", err)
		}
		if failure := response.GetRequestError(); failure != nil {
			return fmt.Errorf("ack refused: %v", failure)
		}
		if receipt := response.GetAckReceipt(); receipt != nil && receipt.GetRequestId() == ackRequestID {
			return nil
		}
	}
}

// closeConsumer half-closes the call; the broker then ends it (the recommended clean close).
func closeConsumer(consumer pb.PulsarService_ConsumeClient) error {
	if err := consumer.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := consumer.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("close: expected the call to end cleanly, got %w", err)
		}
	}
}

// redelivered subscribes again and counts the messages delivered before a fresh one.
func redelivered(ctx context.Context, client pb.PulsarServiceClient, topic string) (int, error) {
	consumer, err := subscribe(ctx, client, topic)
	if err != nil {
		return 0, err
	}
	if _, err := produce(ctx, client, topic, total, 1, 1); err != nil {
		return 0, err
	}
	count := 0
	for {
		response, err := consumer.Recv()
		if err != nil {
			return 0, fmt.Errorf("resubscribe: %w", err)
		}
		for _, entry := range response.GetMessages().GetEntries() {
			for _, message := range entry.GetMessages() {
				if string(message.GetPayload()) == fmt.Sprintf("msg-%d", total) {
					return count, closeConsumer(consumer)
				}
				count++
			}
		}
	}
}

// readErrorInfo reads Pulsar's error name the way any gRPC client can: from the standard
// status details, without the pulsar-error-code trailer.
func readErrorInfo(ctx context.Context, client pb.PulsarServiceClient, out *summary) error {
	missing := "persistent://public/default/go-never-produced"
	_, err := client.GetLastMessageId(ctx, &pb.GetLastMessageIdRequest{Topic: missing})
	st, ok := status.FromError(err)
	if err == nil || !ok || st.Code() != codes.NotFound {
		return fmt.Errorf("GetLastMessageId of a missing topic: expected NOT_FOUND, got %v", err)
	}
	for _, detail := range st.Details() {
		if info, ok := detail.(*errdetails.ErrorInfo); ok {
			out.ErrorReason, out.ErrorDomain, out.ErrorMeta = info.GetReason(), info.GetDomain(), info.GetMetadata()
			return nil
		}
	}
	return fmt.Errorf("no ErrorInfo in the status details of %v", err)
}

func refuseTypo(ctx context.Context, client pb.PulsarServiceClient, topic string, out *summary) error {
	md := metadata.Pairs("x-pulsar-topic", topic, "x-pulsar-subscription", "s", "x-pulsar-subscripton-type", "Shared")
	consumer, err := client.Consume(metadata.NewOutgoingContext(ctx, md))
	if err != nil {
		return err
	}
	_, err = consumer.Recv()
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "x-pulsar-subscripton-type") {
		return fmt.Errorf("misspelt parameter: expected INVALID_ARGUMENT naming it, got %v", err)
	}
	out.TypoRefusal = st.Code().String()
	return nil
}
