package kstorm.spark;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Enumeration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * A class loader that is its parent, except that the session extension providers named in
 * {@link #DEFERRED} are not listed: set as the thread's context class loader while a
 * SparkSession is built, Spark's {@code ServiceLoader} of
 * {@code SparkSessionExtensionsProvider} does not find them, and the caller applies them
 * later (kstorm/_spark/session.py).
 *
 * <p>MLlib's {@code InternalFunctionRegistration} registers two SQL functions built with
 * Scala reflection: ~1 s of CPU at session start on a 2-core machine, for functions a
 * topology does not use. A service file is left out only if every provider it names is
 * deferred; any other (a user's extension) loads as before.
 */
public final class DeferredSessionExtensions extends ClassLoader {

  public static final String SERVICE =
      "META-INF/services/org.apache.spark.sql.SparkSessionExtensionsProvider";

  public static final Set<String> DEFERRED =
      Set.of("org.apache.spark.sql.ml.InternalFunctionRegistration");

  static {
    registerAsParallelCapable();
  }

  public DeferredSessionExtensions(ClassLoader parent) {
    super(parent);
  }

  @Override
  public Enumeration<URL> getResources(String name) throws IOException {
    Enumeration<URL> all = super.getResources(name);
    if (!SERVICE.equals(name)) {
      return all;
    }
    List<URL> kept = new ArrayList<>();
    while (all.hasMoreElements()) {
      URL url = all.nextElement();
      Set<String> named = providers(url);
      if (named.isEmpty() || !DEFERRED.containsAll(named)) {
        kept.add(url);
      }
    }
    return Collections.enumeration(kept);
  }

  /** The provider class names a service file lists (comments and blanks left out). */
  static Set<String> providers(URL url) throws IOException {
    Set<String> names = new HashSet<>();
    try (InputStream in = url.openStream();
        BufferedReader reader =
            new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
      String line;
      while ((line = reader.readLine()) != null) {
        int hash = line.indexOf('#');
        String name = (hash >= 0 ? line.substring(0, hash) : line).trim();
        if (!name.isEmpty()) {
          names.add(name);
        }
      }
    }
    return names;
  }
}
