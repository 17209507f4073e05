package tidemark.fs;

import java.io.IOException;
import java.util.Arrays;
import java.util.Comparator;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Hadoop's local file system, listing each directory in name order.
 *
 * <p>Spark's file stream source orders new files by modification time only (a stable sort of the
 * listing), so files with equal times keep the order the file system listed them in. A local
 * directory lists in whatever order its entries are stored (ext4: by hash, tmpfs: newest first),
 * so when several landing files share a modification time (a collector writing faster than the
 * clock's resolution, or a copy that sets whole seconds) and {@code maxFilesPerTrigger} splits
 * them across micro-batches, a later file of a host could be read before an earlier one. Listing
 * in name order makes ties read in name order, as object stores already list (S3, GCS and ADLS
 * list keys in lexicographic order): a collector that names its files in the order it writes them
 * (a zero-padded sequence or a UTC timestamp) then has each host's files read in order.
 *
 * <p>Tidemark's sessions set {@code spark.hadoop.fs.file.impl} to this class
 * (tidemark.sparkenv); nothing else changes: reads, writes, checksums and Delta's log handling
 * are {@link LocalFileSystem}'s own.
 */
public class NameOrderedLocalFileSystem extends LocalFileSystem {
  private static final Comparator<FileStatus> BY_NAME =
      Comparator.comparing((FileStatus status) -> status.getPath().getName());

  @Override
  public FileStatus[] listStatus(Path path) throws IOException {
    FileStatus[] statuses = super.listStatus(path);
    Arrays.sort(statuses, BY_NAME);
    return statuses;
  }
}
