package ttl.delta;

import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.util.sketch.BloomFilter;

/**
 * A filter that keeps the table's rows whose {@code key_hash} may be one of a batch's
 * ({@code ttl/store/distributed.py}: the stored rows the executors' fold reads).
 *
 * <p>A join with the batch's distinct hashes did it before: Spark broadcast them, and its
 * driver read every one (about 2.6M for a batch of 3M uniform updates) and built the hash
 * table itself, about a quarter of the driver's Java time in such a batch. Here the
 * executors build a Bloom filter of the hashes (Spark's own, {@code
 * DataFrameStatFunctions.bloomFilter}: an aggregate, each partition's filter merged on an
 * executor), the driver receives the merged bit array and broadcasts it (about 3.6 MB for
 * 3M hashes at the default 1%), and each task of the table's scan tests its rows against
 * it. A row another key's hash lets through (the
 * filter's false positives, {@code fpp} of the others) is dropped by the fold, which keeps
 * only the stored rows of its own input's hashes.
 */
public final class KeyFilter implements UDF1<Long, Boolean> {

    private static final long serialVersionUID = 1L;

    private final Broadcast<BloomFilter> filter;

    private KeyFilter(Broadcast<BloomFilter> filter) {
        this.filter = filter;
    }

    @Override
    public Boolean call(Long hash) {
        return hash != null && filter.value().mightContainLong(hash);
    }

    /**
     * A condition on {@code column} (a {@code BIGINT}) that holds for every value {@code
     * keys} has in the same column, and for about {@code fpp} of the others: {@code
     * expected} is how many values {@code keys} holds at most (it sizes the filter).
     */
    public static Column mightContain(JavaSparkContext context, Dataset<Row> keys,
                                      String column, long expected, double fpp) {
        long items = Math.max(1L, expected);
        // At least one bit: a small set at a high fpp would otherwise get none.
        long bits = Math.max(1L, BloomFilter.optimalNumOfBits(items, fpp));
        BloomFilter bloom = keys.stat().bloomFilter(column, items, bits);
        Broadcast<BloomFilter> shared = context.broadcast(bloom);
        return functions.udf(new KeyFilter(shared), DataTypes.BooleanType)
            .apply(functions.col(column));
    }
}
