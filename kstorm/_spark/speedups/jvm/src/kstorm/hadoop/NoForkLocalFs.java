package kstorm.hadoop;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * The {@code file:} scheme of Hadoop's FileContext (what Spark's checkpoint logs are written
 * through) on {@link NoForkLocalFileSystem}: Hadoop's {@code RawLocalFs} with that file
 * system underneath. Set as {@code fs.AbstractFileSystem.file.impl}.
 */
public class NoForkLocalFs extends DelegateToFileSystem {

  public NoForkLocalFs(Configuration conf) throws IOException, URISyntaxException {
    this(FsConstants.LOCAL_FS_URI, conf);
  }

  public NoForkLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(uri, new NoForkLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
  }

  @Override
  public int getUriDefaultPort() {
    return -1;
  }

  @Override
  public FsServerDefaults getServerDefaults(Path f) throws IOException {
    return LocalConfigKeys.getServerDefaults();
  }

  @Override
  @Deprecated
  public FsServerDefaults getServerDefaults() throws IOException {
    return LocalConfigKeys.getServerDefaults();
  }

  @Override
  public boolean isValidName(String src) {
    return true; // any path the local file system takes
  }
}
