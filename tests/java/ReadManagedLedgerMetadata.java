// Reads managed-ledger metadata with the Java classes of Pulsar's MLDataFormats.proto, as a
// Pulsar tool does: `java ReadManagedLedgerMetadata <ManagedLedgerInfo file> <ManagedCursorInfo file>`.
// Written against Pulsar's class names (org.apache.bookkeeper.mledger.proto.MLDataFormats); the
// test compiles it with classes generated from protos/pulsargrpc/internal/v1/ml_data_formats.proto
// (tests/e2e/test_ml_data_formats.py). parseFrom fails on a missing required field.

import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.bookkeeper.mledger.proto.MLDataFormats;

public class ReadManagedLedgerMetadata {
    public static void main(String[] args) throws Exception {
        MLDataFormats.ManagedLedgerInfo ledger =
            MLDataFormats.ManagedLedgerInfo.parseFrom(Files.readAllBytes(Path.of(args[0])));
        for (MLDataFormats.ManagedLedgerInfo.LedgerInfo info : ledger.getLedgerInfoList()) {
            System.out.println("ledgerId=" + info.getLedgerId() + ", entries=" + info.getEntries()
                + ", size=" + info.getSize() + ", timestamp=" + info.getTimestamp());
        }
        MLDataFormats.ManagedCursorInfo cursor =
            MLDataFormats.ManagedCursorInfo.parseFrom(Files.readAllBytes(Path.of(args[1])));
        System.out.println("cursorsLedgerId=" + cursor.getCursorsLedgerId()
            + ", markDeleteLedgerId=" + cursor.getMarkDeleteLedgerId()
            + ", markDeleteEntryId=" + cursor.getMarkDeleteEntryId()
            + ", lastActive=" + cursor.getLastActive());
        for (MLDataFormats.MessageRange range : cursor.getIndividualDeletedMessagesList()) {
            System.out.println("deleted=(" + range.getLowerEndpoint().getLedgerId() + ":"
                + range.getLowerEndpoint().getEntryId() + ", " + range.getUpperEndpoint().getLedgerId()
                + ":" + range.getUpperEndpoint().getEntryId() + "]");
        }
        for (MLDataFormats.BatchedEntryDeletionIndexInfo batch
                : cursor.getBatchedEntryDeletionIndexInfoList()) {
            System.out.println("batch=" + batch.getPosition().getLedgerId() + ":"
                + batch.getPosition().getEntryId() + ", deleteSet=" + batch.getDeleteSetList());
        }
    }
}
