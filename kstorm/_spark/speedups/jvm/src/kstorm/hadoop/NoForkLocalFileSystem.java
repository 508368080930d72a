package kstorm.hadoop;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Set;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system without a child process per checkpoint file.
 *
 * <p>Without Hadoop's native library (pyspark ships none), {@link RawLocalFileSystem} runs
 * {@code chmod} to set the permission of every file it creates and {@code readlink} for the
 * status of both ends of every rename. Spark writes each micro-batch's offset-log and
 * commit-log entries as a new file renamed into place, so a batch cost about three process
 * spawns from the driver JVM. Here the permission is set and a symbolic link recognised
 * through {@code java.nio} instead; everything else, and the status of an actual symbolic
 * link, is Hadoop's own code.
 */
public class NoForkLocalFileSystem extends RawLocalFileSystem {

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    String rwx = permission.getUserAction().SYMBOL + permission.getGroupAction().SYMBOL
        + permission.getOtherAction().SYMBOL;
    Set<PosixFilePermission> wanted = PosixFilePermissions.fromString(rwx);
    try {
      Files.setPosixFilePermissions(pathToFile(p).toPath(), wanted);
    } catch (UnsupportedOperationException e) {
      super.setPermission(p, permission); // a file system without POSIX permissions
    }
  }

  @Override
  public FileStatus getFileLinkStatus(Path f) throws IOException {
    File file = pathToFile(f);
    if (Files.isSymbolicLink(file.toPath())) {
      return super.getFileLinkStatus(f);
    }
    return getFileStatus(f); // what Hadoop returns for anything but a link
  }
}
